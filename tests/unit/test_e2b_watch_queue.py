"""A watcher the SDK polls: its queue is bounded, and a loss (the queue full, or the guest's
overflow) is said once the events before it are read, then the watch's end."""

from __future__ import annotations

import asyncio

import pytest

from sanbox.control.guest import FsEvent
from sanbox.e2b import envd_watch
from sanbox.e2b.connect import ConnectError
from sanbox.e2b.envd_watch import Queued

pytestmark = pytest.mark.unit


class Batches:
    """Stands in for a guest watch: these batches, then the folder gone."""

    def __init__(self, *batches: list[FsEvent]) -> None:
        self._batches = list(batches)

    async def next(self) -> list[FsEvent] | None:
        return self._batches.pop(0) if self._batches else None


def read(*batches: list[FsEvent]) -> Queued:
    queued = Queued()
    asyncio.run(queued.read(Batches(*batches)))  # type: ignore[arg-type]
    return queued


def test_a_full_queue_loses_the_rest_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(envd_watch, "MAX_QUEUED", 3)
    queued = read([FsEvent(f"f{i}", "create") for i in range(5)])
    assert [e["name"] for e in queued.take()] == ["f0", "f1", "f2"]
    with pytest.raises(ConnectError) as lost:
        queued.take()
    assert lost.value.code == "data_loss"
    with pytest.raises(ConnectError) as ended:
        queued.take()
    assert ended.value.code == "not_found"  # the folder is gone: the watch ended


def test_the_guests_overflow_is_a_loss_and_types_are_e2bs() -> None:
    queued = read([FsEvent("a", "rename"), FsEvent("", "overflow")], [FsEvent("b", "chmod")])
    assert queued.take() == [
        {"name": "a", "type": "EVENT_TYPE_RENAME"},
        {"name": "b", "type": "EVENT_TYPE_CHMOD"},
    ]
    with pytest.raises(ConnectError) as lost:
        queued.take()
    assert lost.value.code == "data_loss"
