"""Watching a folder in the guest with inotify: the real agent as a local subprocess driven by the
real host client (events, recursion, the agent's own writes, the folder's end, an agent that
cannot), and the agent's watch stream in-process for its bounds (streams, folders) and an
overflow of the kernel's queue said honestly. Every watch ends with its test: no inotify
instance or folder count is left behind."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sanbox.guest import protocol as p
from sanbox.guest import watch as guest_watch
from sanbox.guest.watch import WatchStream
from sanbox.host.agent import AgentClient, DirWatch, RemoteError
from sanbox.host.agent.watch import Watches

from .test_agent import AgentProcess, run

pytestmark = pytest.mark.component


@pytest.fixture
def guest() -> Iterator[AgentProcess]:
    workdir = Path(tempfile.mkdtemp(prefix="sbx-watch-", dir="/tmp"))
    agent = AgentProcess(workdir)
    agent.start()
    try:
        yield agent
        agent.kill()
        assert "Traceback" not in agent.log.read_text()
    finally:
        agent.kill()
        shutil.rmtree(workdir, ignore_errors=True)


async def arrived(watch: DirWatch, count: int) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    while len(seen) < count:
        batch = await asyncio.wait_for(watch.next(), 10)
        assert batch is not None, f"the watch ended after {seen}"
        seen += [(e.name, e.type) for e in batch]
    return seen


def test_events_as_e2b_reports_them(guest: AgentProcess) -> None:
    folder = guest.workdir / "w"
    folder.mkdir()

    async def body(c: AgentClient) -> None:
        watch = await c.watches.open(str(folder))
        (folder / "a").write_text("1")
        assert await arrived(watch, 2) == [("a", "create"), ("a", "write")]
        (folder / "a").rename(folder / "b")
        assert await arrived(watch, 2) == [("a", "rename"), ("b", "create")]
        os.chmod(folder / "b", 0o600)
        assert await arrived(watch, 1) == [("b", "chmod")]
        await c.files.put(str(folder / "b"), b"whole")  # a temporary renamed over it
        assert await arrived(watch, 2) == [("b", "create"), ("b", "write")]
        (folder / "b").unlink()
        assert await arrived(watch, 1) == [("b", "remove")]
        (folder / "sub").mkdir()  # not recursive: the folder, not what it holds
        (folder / "sub" / "inner").write_text("x")
        (folder / "c").write_text("")
        assert await arrived(watch, 2) == [("sub", "create"), ("c", "create")]
        shutil.rmtree(folder)
        while (batch := await asyncio.wait_for(watch.next(), 10)) is not None:
            assert all(e.type == "remove" for e in batch)  # then it ends
        await watch.close()

    run(guest, body)


def test_recursive_follows_new_folders_and_forgets_moved_ones(guest: AgentProcess) -> None:
    folder = guest.workdir / "tree"
    (folder / "old" / "deep").mkdir(parents=True)

    async def body(c: AgentClient) -> None:
        watch = await c.watches.open(str(folder), recursive=True)
        (folder / "old" / "deep" / "f").write_text("x")
        assert await arrived(watch, 2) == [("old/deep/f", "create"), ("old/deep/f", "write")]
        (folder / "new" / "er").mkdir(parents=True)
        seen = await arrived(watch, 2)
        assert seen == [("new", "create"), ("new/er", "create")]
        (folder / "new" / "er" / "g").write_text("")
        assert await arrived(watch, 1) == [("new/er/g", "create")]
        (folder / "old").rename(guest.workdir / "outside")
        assert await arrived(watch, 1) == [("old", "rename")]
        (guest.workdir / "outside" / "deep" / "unseen").write_text("x")  # no longer watched
        (folder / "last").write_text("")
        assert await arrived(watch, 1) == [("last", "create")]
        await watch.close()

    run(guest, body)


def test_refusals(guest: AgentProcess) -> None:
    async def body(c: AgentClient) -> None:
        for path, code in [
            (str(guest.workdir / "none"), "not_found"),
            (str(guest.workdir / "agent.log"), "not_a_directory"),
            ("relative", "invalid_path"),
        ]:
            with pytest.raises(RemoteError) as refused:
                await c.watches.open(path)
            assert refused.value.code == code
        old = Watches(c, {"protocol": 2})  # an agent from before protocol 3
        assert not old.supported
        with pytest.raises(RemoteError) as refused:
            await old.open(str(guest.workdir))
        assert refused.value.code == "not_supported"

    run(guest, body)


# the agent's stream in-process ----------------------------------------------------------------


class Host:
    """What a watch stream sends, as the host would read it."""

    def __init__(self) -> None:
        self.frames: list[p.Frame] = []
        self.arrived = asyncio.Event()

    def send(self, *frames: p.Frame) -> None:
        self.frames.extend(frames)
        self.arrived.set()

    def msgs(self) -> list[dict[str, object]]:
        return [f.body for f in self.frames if isinstance(f, p.Msg)]

    def data(self) -> bytes:
        return b"".join(f.data for f in self.frames if isinstance(f, p.Data))

    async def until(self, what: str, timeout: float = 10) -> None:
        async with asyncio.timeout(timeout):
            while what.encode() not in self.data() and not any(
                m.get("type") == what for m in self.msgs()
            ):
                self.arrived.clear()
                await self.arrived.wait()


def stream(path: Path, host: Host, sid: int = 1, recursive: bool = False) -> WatchStream:
    s = WatchStream(sid, {"path": str(path), "recursive": recursive}, host.send)
    s.start()
    return s


async def ended(*streams: WatchStream) -> None:
    for s in streams:
        s.abort()
    await asyncio.sleep(0)  # let their tasks see the cancel
    async with asyncio.timeout(5):
        while WatchStream.streams or WatchStream.watches:
            await asyncio.sleep(0.01)


def test_bounds_of_streams_and_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guest_watch, "MAX_STREAMS", 2)
    monkeypatch.setattr(guest_watch, "MAX_WATCHES", 4)
    for name in ("a", "b", "c"):
        (tmp_path / "tree" / name).mkdir(parents=True)

    async def body() -> None:
        one, two, three = Host(), Host(), Host()
        first = stream(tmp_path, one)
        await one.until("watching")
        second = stream(tmp_path / "tree", two, 2, recursive=True)  # 4 folders: 5 in all
        await two.until("error")
        assert two.msgs()[-1]["code"] == "too_many_watches"
        third = stream(tmp_path, three, 3)
        await three.until("watching")
        fourth_host = Host()
        fourth = stream(tmp_path, fourth_host, 4)  # the third stream at once
        await fourth_host.until("error")
        assert fourth_host.msgs()[-1]["code"] == "too_many_watches"
        await ended(first, second, third, fourth)
        assert (WatchStream.streams, WatchStream.watches) == (0, 0)

    asyncio.run(body())


def test_an_overflow_of_the_kernels_queue_is_said(tmp_path: Path) -> None:
    queued = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    (tmp_path / "a").touch()
    (tmp_path / "b").touch()

    async def body() -> None:
        host = Host()
        s = stream(tmp_path, host)
        await host.until("watching")
        for i in range(queued + 100):  # no await: the agent reads none of it meanwhile
            os.utime(tmp_path / ("a" if i % 2 else "b"), (i, i))
        await host.until('"overflow"')
        assert host.data().endswith(b'{"type":"overflow"}\n')
        await ended(s)

    asyncio.run(body())
    assert (WatchStream.streams, WatchStream.watches) == (0, 0)
