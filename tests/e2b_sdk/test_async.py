"""E2B's async SDK, unmodified, against Sanbox: the same calls as test_sync through
`AsyncSandbox`, one event loop per test (`asyncio.run`)."""

from __future__ import annotations

import asyncio
import time

import pytest
from e2b import AsyncSandbox, CommandExitException, PtySize, SandboxQuery
from e2b.exceptions import AuthenticationException, SandboxNotFoundException

from .conftest import E2bServer

pytestmark = pytest.mark.e2b


async def _until(check: object, timeout: float = 10.0) -> None:
    t0 = time.monotonic()
    while not await check():  # type: ignore[operator]
        assert time.monotonic() - t0 < timeout, f"{check} did not happen in {timeout}s"
        await asyncio.sleep(0.05)


def test_the_async_sdk(e2b_server: E2bServer) -> None:
    asyncio.run(_the_async_sdk(e2b_server))


async def _the_async_sdk(e2b_server: E2bServer) -> None:
    sbx = await AsyncSandbox.create(
        "base", metadata={"suite": "async"}, envs={**e2b_server.envs, "A": "1"}
    )
    try:
        out = await sbx.commands.run("echo $A $B; echo e >&2; pwd", envs={"B": "2"}, cwd="/")
        assert (out.stdout, out.stderr, out.exit_code) == ("1 2\n/\n", "e\n", 0)
        with pytest.raises(CommandExitException):
            await sbx.commands.run("exit 4")

        background = await sbx.commands.run("sleep 300", background=True)
        assert background.pid in [p.pid for p in await sbx.commands.list()]
        assert await sbx.commands.kill(background.pid)
        with pytest.raises(CommandExitException):
            await background.wait()

        cat = await sbx.commands.run("cat", background=True, stdin=True)
        await sbx.commands.send_stdin(cat.pid, "via stdin\n")
        await sbx.commands.close_stdin(cat.pid)
        assert (await cat.wait()).stdout == "via stdin\n"

        base = f"{e2b_server.scratch}/async-files"
        assert await sbx.files.make_dir(base)
        events: list[tuple[str, str]] = []
        watch = await sbx.files.watch_dir(base, lambda e: events.append((e.name, e.type.value)))
        await sbx.files.write(f"{base}/t.txt", "async text")

        async def created() -> bool:
            return ("t.txt", "create") in events

        await _until(created)
        await watch.stop()  # type: ignore[no-untyped-call]  # e2b leaves it unannotated
        assert await sbx.files.read(f"{base}/t.txt") == "async text"
        assert bytes(await sbx.files.read(f"{base}/t.txt", format="bytes")) == b"async text"
        assert [e.name for e in await sbx.files.list(base)] == ["t.txt"]
        await sbx.files.rename(f"{base}/t.txt", f"{base}/u.txt")
        assert await sbx.files.exists(f"{base}/u.txt")
        assert (await sbx.files.get_info(f"{base}/u.txt")).size == len(b"async text")
        await sbx.files.remove(f"{base}/u.txt")
        assert not await sbx.files.exists(f"{base}/u.txt")

        seen = bytearray()
        terminal = await sbx.pty.create(PtySize(rows=24, cols=80), on_data=seen.extend)
        await sbx.pty.resize(terminal.pid, PtySize(rows=40, cols=120))
        await sbx.pty.send_stdin(terminal.pid, b"stty size; exit 0\n")
        await terminal.wait()
        assert b"40 120" in seen

        found = await AsyncSandbox.list(
            query=SandboxQuery(metadata={"suite": "async"})
        ).next_items()
        assert [s.sandbox_id for s in found] == [sbx.sandbox_id]
        assert await AsyncSandbox.list(api_key=e2b_server.other_key).next_items() == []
        with pytest.raises(SandboxNotFoundException):
            await AsyncSandbox.connect(sbx.sandbox_id, api_key=e2b_server.other_key)
        with pytest.raises(AuthenticationException):
            await AsyncSandbox.create("base", api_key="sbk_bad")

        await sbx.set_timeout(1)
        await _until(lambda: _stopped(sbx), timeout=5)
    finally:
        await AsyncSandbox.kill(sbx.sandbox_id)


async def _stopped(sbx: AsyncSandbox) -> bool:
    return not await sbx.is_running()


def test_watch_dir_streams_a_tree(e2b_server: E2bServer) -> None:
    asyncio.run(_watch_dir_streams_a_tree(e2b_server))


async def _watch_dir_streams_a_tree(e2b_server: E2bServer) -> None:
    sbx = await AsyncSandbox.create("base", envs=e2b_server.envs)
    try:
        base = f"{e2b_server.scratch}/async-tree"
        await sbx.files.make_dir(f"{base}/old")
        events: list[tuple[str, str]] = []
        ended: list[Exception | None] = []
        watch = await sbx.files.watch_dir(
            base,
            lambda e: events.append((e.name, e.type.value)),
            on_exit=ended.append,
            recursive=True,
        )
        await sbx.files.write(f"{base}/old/a.txt", "a")
        await sbx.commands.run(f"mkdir -p {base}/new/er && mv {base}/old/a.txt {base}/new/er/b")

        # a folder's watch is added when its creation is read; what the folder holds by then is
        # reported as created, which can come before the rename read after it: wait for all
        moved = {("new", "create"), ("new/er", "create"), ("old/a.txt", "rename")}

        async def seen_all() -> bool:
            return moved | {("new/er/b", "create")} <= set(events)

        await _until(seen_all)
        assert events[:2] == [("old/a.txt", "create"), ("old/a.txt", "write")]
        await watch.stop()  # type: ignore[no-untyped-call]  # e2b leaves it unannotated
        assert ended == [None]
    finally:
        await AsyncSandbox.kill(sbx.sandbox_id)
