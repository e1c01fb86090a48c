"""A watcher the SDK polls: its queue is bounded, and a loss (the queue full, or the guest's
overflow) is said once the events queued are read, then the watch's end; a computer whose agent
has no inotify is polled by listings."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from sanbox.control.guest import FileInfo, FsEvent
from sanbox.e2b import envd_watch
from sanbox.e2b.connect import ConnectError
from sanbox.e2b.envd import Sandbox
from sanbox.e2b.envd_watch import Queued, Watchers

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


class OldGuest:
    """Stands in for the control plane of a computer whose agent has no inotify (before
    protocol 3): `watch_dir` gives None, and the folder is what `files` says."""

    def __init__(self) -> None:
        self.files: dict[str, FileInfo] = {}

    async def stat_file(self, org: object, computer: str, path: str) -> FileInfo:
        return FileInfo(path.rsplit("/", 1)[-1], path, "dir", 0, 0o40755, 0.0, 0, 0)

    async def list_files(self, org: object, computer: str, path: str) -> list[FileInfo]:
        return list(self.files.values())

    @contextlib.asynccontextmanager
    async def watch_dir(
        self, org: object, computer: str, path: str, recursive: bool
    ) -> AsyncIterator[None]:
        yield None

    def put(self, name: str, size: int) -> None:
        self.files[name] = FileInfo(name, f"/w/{name}", "file", size, 0o100644, 1.0, 0, 0)


def test_an_agent_without_inotify_is_polled() -> None:
    async def body() -> None:
        guest = OldGuest()
        sb = Sandbox(guest, None, "cmp_x", "root", "/root", {})  # type: ignore[arg-type]
        watchers = Watchers()
        made = await watchers.create(sb, {"path": "/w"})
        guest.put("a", 1)
        got = await watchers.events(sb, made)
        assert [(e["name"], e["type"]) for e in got["events"]] == [("a", "EVENT_TYPE_CREATE")]
        guest.put("a", 2)
        del guest.files["a"]
        guest.put("b", 1)
        got = await watchers.events(sb, made)
        assert [(e["name"], e["type"]) for e in got["events"]] == [
            ("b", "EVENT_TYPE_CREATE"),
            ("a", "EVENT_TYPE_REMOVE"),
        ]
        assert await watchers.remove(sb, made) == {}
        with pytest.raises(ConnectError) as gone:
            await watchers.events(sb, made)
        assert gone.value.code == "not_found"

    asyncio.run(body())


def test_watchers_that_ended_long_ago_are_forgotten() -> None:
    old, recent, live = read(), read(), Queued()  # two ended (their folder gone), one not

    async def body() -> None:
        watchers = Watchers()
        now = asyncio.get_running_loop().time()
        old.ended_at, recent.ended_at = now - envd_watch.ENDED_KEPT - 1, now
        watchers._by_computer = {"cmp_gone": {"w1": old}, "cmp_here": {"w2": recent, "w3": live}}
        watchers._sweep()
        assert watchers._by_computer == {"cmp_here": {"w2": recent, "w3": live}}

    asyncio.run(body())
