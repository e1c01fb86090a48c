"""A verb's operation is beaten while the verb runs (`Fleet.operating`), so the stale sweep takes
a long one for its node's, alive, and only a node that stopped beating for a dead one."""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest
from sqlalchemy import select

from sanbox.fleet import operations
from sanbox.store.fleet_models import OperationRow

from .conftest import Server

pytestmark = pytest.mark.component


def test_a_verb_beats_its_operation_while_it_runs(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(operations, "BEAT_EVERY", 0.05)
    fleet = server.client.app.state.computers.fleet  # type: ignore[attr-defined]

    def beat_at() -> datetime | None:
        with fleet.db.session() as s:
            row = s.scalars(
                select(OperationRow).where(OperationRow.computer_id == "cmp_beating")
            ).one()
        return row.beat_at  # type: ignore[no-any-return]

    async def hold() -> None:
        async with fleet.operating("cmp_beating", "snapshot"):
            first = beat_at()
            for _ in range(250):
                await asyncio.sleep(0.02)
                if beat_at() != first:
                    break
            assert beat_at() != first, "the running operation was not beaten"
        ended = beat_at()
        await asyncio.sleep(0.2)
        assert beat_at() == ended  # no beat once it ended

    server.client.portal.call(hold)  # type: ignore[union-attr]
