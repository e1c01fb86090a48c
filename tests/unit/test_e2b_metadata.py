"""E2B's metadata beside the labels: kept as given, the old computers' read from their labels,
and only valid label pairs mirrored as labels (in the order given, within the room left)."""

from __future__ import annotations

import pytest

from sanbox.e2b import identity
from sanbox.store.models import ComputerRow

pytestmark = pytest.mark.unit


def test_metadata_are_the_kept_ones_or_an_old_computers_labels() -> None:
    labels = {"team": "blue", identity.AUTO_PAUSE: "true"}
    kept = ComputerRow(labels=labels, e2b_metadata={"userId": "A1"})
    old = ComputerRow(labels=labels, e2b_metadata=None)
    assert identity.metadata(kept) == {"userId": "A1"}
    assert identity.metadata(old) == {"team": "blue"}  # never E2B's own settings


def test_only_valid_label_pairs_are_mirrored_within_the_room() -> None:
    given = {"userId": "A1", "team": "blue", "e2b/own": "x", "tier": "web", "zone": "a"}
    assert identity.mirrored_labels(given, 64) == {"team": "blue", "tier": "web", "zone": "a"}
    assert identity.mirrored_labels(given, 2) == {"team": "blue", "tier": "web"}
