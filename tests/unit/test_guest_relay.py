"""The exec stream's relays (guest/relay.py) on real pipes, and the agent's account lookups
(guest/accounts.py: read again only when /etc/passwd or /etc/group changes)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import pytest

from sanbox.guest import accounts, process
from sanbox.guest import protocol as p
from sanbox.guest.errors import AgentRequestError
from sanbox.guest.flow import SendWindow
from sanbox.guest.relay import OutputRelay, StdinRelay
from sanbox.guest.ssh import SshStream

pytestmark = pytest.mark.unit


def _pipe() -> tuple[int, int]:
    read, write = os.pipe()
    os.set_blocking(write, False)
    return read, write


def test_stdin_more_than_the_pipe_holds_arrives_whole_then_ends() -> None:
    async def main() -> None:
        read, write = _pipe()
        credit: list[int] = []
        ended: list[int] = []
        relay = StdinRelay(write, credit.append, ended.append)
        data = os.urandom(3 * 1024 * 1024)  # more than a pipe holds: most of it waits
        for start in range(0, len(data), 64 * 1024):
            relay.push(data[start : start + 64 * 1024])
        relay.eof()
        assert not ended, "EOF before the queued bytes were written"
        got = bytearray()
        os.set_blocking(read, False)
        while not ended:
            await asyncio.sleep(0)
            with contextlib.suppress(BlockingIOError):
                got += os.read(read, 1024 * 1024)
        assert bytes(got) + _rest(read) == data
        assert sum(credit) == len(data)
        assert ended == [write]
        os.close(read)
        os.close(write)

    asyncio.run(main())


def _rest(fd: int) -> bytes:
    out = b""
    while True:
        try:
            chunk = os.read(fd, 1024 * 1024)
        except BlockingIOError:
            return out
        if not chunk:
            return out
        out += chunk


def test_stdin_of_a_process_that_closed_its_input_is_credited_and_dropped() -> None:
    async def main() -> None:
        read, write = _pipe()
        os.close(read)  # the process ended without reading
        credit: list[int] = []
        ended: list[int] = []
        relay = StdinRelay(write, credit.append, ended.append)
        relay.push(b"x" * 1000)
        relay.push(b"y" * 500)  # after the break: credited at once, not written
        relay.eof()
        assert sum(credit) == 1500, "the host would wait for credit forever"
        assert ended == [write]
        os.close(write)

    asyncio.run(main())


def test_output_waits_for_credit_and_ends_with_eof() -> None:
    async def main() -> None:
        read, write = os.pipe()
        os.set_blocking(read, False)
        sent: list[p.Frame] = []
        window = SendWindow(10)
        relay = OutputRelay(7, window, sent.append)
        relay.add(read, p.STDOUT)
        os.write(write, b"a" * 25)
        os.close(write)
        for _ in range(20):
            await asyncio.sleep(0)
        assert [f.data for f in sent if isinstance(f, p.Data)] == [b"a" * 10]
        assert relay.open and not relay.silent_for(0.0), "waiting for credit is not silence"
        window.grant(100)
        relay.credit()
        await asyncio.wait_for(relay.ended(idle=5.0), 5)
        assert b"".join(f.data for f in sent if isinstance(f, p.Data)) == b"a" * 25
        assert isinstance(sent[-1], p.Eof) and sent[-1].channel == p.STDOUT
        assert not relay.open
        os.close(read)

    asyncio.run(main())


def test_output_held_open_by_a_silent_background_process_stops_being_awaited() -> None:
    async def main() -> None:
        read, write = os.pipe()  # `write` stays open, as a background child would hold it
        os.set_blocking(read, False)
        sent: list[p.Frame] = []
        relay = OutputRelay(3, SendWindow(), sent.append)
        relay.add(read, p.STDERR)
        await asyncio.wait_for(relay.ended(idle=0.1), 5)
        assert relay.open and not sent
        relay.stop()
        os.close(read)
        os.close(write)

    asyncio.run(main())


def test_accounts_are_looked_up_again_only_when_their_files_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    passwd, group = tmp_path / "passwd", tmp_path / "group"
    passwd.write_text("root:x:0:0::/root:/bin/sh\n")
    group.write_text("root:x:0:\n")
    monkeypatch.setattr(accounts, "ACCOUNTS", (str(passwd), str(group)))
    monkeypatch.setattr(accounts, "_known", {})
    monkeypatch.setattr(accounts, "_known_files", [])
    looked: list[object] = []

    def look_up(user: object) -> accounts.Identity:
        looked.append(user)
        return accounts.Identity(0, 0, "root", "/root", "/bin/sh", (0,))

    monkeypatch.setattr(accounts, "_look_up", look_up)
    accounts.resolve_user(None)
    accounts.resolve_user(None)
    accounts.resolve_user("root")
    assert looked == [None, "root"]
    passwd.write_text("root:x:0:0::/root:/bin/sh\nagent:x:1000:1000::/home/agent:/bin/sh\n")
    accounts.resolve_user(None)
    assert looked == [None, "root", None], "a new account file must be read again"


def test_a_user_that_is_neither_a_name_nor_a_uid_is_refused() -> None:
    with pytest.raises(AgentRequestError) as err:
        accounts.resolve_user(["root"])
    assert err.value.code == "bad_request"


def _exec_writes(
    command: str, stream_class: type[process.ExecStream] = process.ExecStream
) -> list[tuple[p.Frame, ...]]:
    """The writes an exec stream of `sh -c command` makes, each as the frames it holds."""
    writes: list[tuple[p.Frame, ...]] = []

    async def main() -> None:
        stream = stream_class(1, {"argv": ["sh", "-c", command]}, lambda *f: writes.append(f))
        stream.on_eof(p.STDIN)  # as a host's exec without input sends it: with the OPEN
        done = asyncio.Event()
        stream.on_finished = lambda _: done.set()
        stream.start()
        await done.wait()

    asyncio.run(main())
    return writes


def _kinds(write: tuple[p.Frame, ...]) -> list[str]:
    return [f.body["type"] if isinstance(f, p.Msg) else type(f).__name__ for f in write]


@pytest.mark.parametrize(
    "command",
    [
        "exec >&- 2>&-; sleep 0.1; exit 3",  # outputs end while the command runs
        "(for i in 1 2 3; do echo $i; sleep 0.05; done) & exit 3",  # they end after it
    ],
)
def test_an_execs_output_ends_go_with_its_exit_in_one_write(command: str) -> None:
    writes = _exec_writes(command)
    assert _kinds(writes[0]) == ["started"]
    assert _kinds(writes[-1]) == ["Eof", "Eof", "exit", "Close"]
    assert {f.channel for f in writes[-1] if isinstance(f, p.Eof)} == {p.STDOUT, p.STDERR}
    assert writes[-1][-2].body["exit_code"] == 3  # type: ignore[union-attr]
    assert all(_kinds(w) == ["Data"] for w in writes[1:-1])
    output = b"".join(f.data for w in writes for f in w if isinstance(f, p.Data))
    assert output == (b"1\n2\n3\n" if "echo" in command else b"")


class _EofAtOnce(process.ExecStream):
    eof_held = False  # as a terminal's and an SSH connection's streams


def test_a_stream_that_does_not_hold_them_sends_output_ends_at_once() -> None:
    assert not process.PtyStream.eof_held and not SshStream.eof_held
    writes = _exec_writes("exec >&- 2>&-; sleep 0.1", _EofAtOnce)
    assert [_kinds(w) for w in writes] == [["started"], ["Eof"], ["Eof"], ["exit", "Close"]]
