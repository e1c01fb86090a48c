"""Which of a host's losses and returns its computers are told of: the first loss and its return
in a window, a loss held back told once the window has passed if the host is still lost, each
host on its own, and nothing kept of a host the caller no longer has."""

from __future__ import annotations

import pytest

from sanbox.control.host_flaps import HostFlaps

pytestmark = pytest.mark.unit


def test_one_loss_and_its_return_are_told_a_window() -> None:
    flaps = HostFlaps(window=100.0)
    assert flaps.lost("h1", 0.0) and flaps.back("h1")
    for at in (10.0, 30.0, 50.0):  # flapping within the window: nothing told
        assert not flaps.lost("h1", at) and not flaps.still_lost("h1", at + 5)
        assert not flaps.back("h1")
    assert flaps.lost("h2", 60.0), "another host is told on its own"
    assert flaps.lost("h1", 100.0) and flaps.back("h1")  # the window has passed


def test_a_loss_held_back_is_told_once_the_window_passes_while_the_host_is_lost() -> None:
    flaps = HostFlaps(window=100.0)
    assert flaps.lost("h1", 0.0) and flaps.back("h1")
    assert not flaps.lost("h1", 40.0)
    assert not flaps.still_lost("h1", 99.0)
    assert flaps.still_lost("h1", 100.0)  # told now: its return will be too
    assert not flaps.still_lost("h1", 200.0), "told once"
    assert flaps.back("h1")


def test_a_return_never_seen_lost_is_told_and_gone_hosts_are_forgotten() -> None:
    flaps = HostFlaps(window=100.0)
    assert flaps.back("h1")  # lost while another node watched: its computers hear it is back
    assert flaps.lost("h1", 0.0) and flaps.lost("h2", 0.0)
    flaps.keep_only({"h2"})
    assert flaps.lost("h1", 1.0), "a host forgotten starts anew"
    with pytest.raises(ValueError):
        HostFlaps(window=-1.0)
