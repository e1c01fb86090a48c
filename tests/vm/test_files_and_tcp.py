import asyncio
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sanbox.host.agent import InvalidPathError
from sanbox.host.runtime import Machine

pytestmark = pytest.mark.vm
Run = Callable[..., Any]
MIB = 1024**2


def test_200_mib_put_and_get_keep_the_bytes(machine: Machine, run: Run, tmp_path: Path) -> None:
    src = tmp_path / "random.bin"
    digest = hashlib.sha256()
    with open(src, "wb") as f:
        for _ in range(200):
            chunk = os.urandom(MIB)
            digest.update(chunk)
            f.write(chunk)
    assert run(machine.agent.files.put("/root/random.bin", str(src)), 600) == 200 * MIB
    guest_sum = run(machine.agent.exec(["sha256sum", "/root/random.bin"]))
    assert guest_sum.stdout.split()[0].decode() == digest.hexdigest()
    back = tmp_path / "back.bin"
    assert run(machine.agent.files.get_to("/root/random.bin", str(back)), 600) == 200 * MIB
    with open(back, "rb") as f:
        assert hashlib.file_digest(f, "sha256").hexdigest() == digest.hexdigest()
    run(machine.agent.files.remove("/root/random.bin"))


def test_file_calls(machine: Machine, run: Run) -> None:
    files = machine.agent.files
    run(files.mkdir("/root/work/a/b"))
    run(files.put("/root/work/a/b/hello.txt", b"hi\n", mode=0o600))
    info = run(files.stat("/root/work/a/b/hello.txt"))
    assert info.size == 3 and info.mode & 0o777 == 0o600
    assert [e.name for e in run(files.list("/root/work/a/b"))] == ["hello.txt"]
    assert run(files.read("/root/work/a/b/hello.txt")) == b"hi\n"
    run(files.remove("/root/work", recursive=True))
    assert run(machine.agent.exec(["test", "-e", "/root/work"])).exit_code == 1


def test_dotdot_paths_are_refused(machine: Machine, run: Run) -> None:
    with pytest.raises(InvalidPathError):
        run(machine.agent.files.put("/root/../etc/passwd", b"x"))
    with pytest.raises(InvalidPathError):
        run(machine.agent.files.read("/tmp/../../etc/shadow"))


def test_tcp_stream_to_a_guest_http_server(machine: Machine, run: Run) -> None:
    async def scenario() -> bytes:
        await machine.agent.exec("cd /tmp && nohup python3 -m http.server 8000 >/dev/null 2>&1 &")
        for _ in range(100):
            probe = await machine.agent.exec(["python3", "-c", CONNECT_8000])
            if probe.exit_code == 0:
                break
            await asyncio.sleep(0.2)
        conn = await machine.agent.tcp(8000)
        await conn.write(b"GET / HTTP/1.0\r\nHost: guest\r\n\r\n")
        reply = b""
        while chunk := await conn.read(65536):
            reply += chunk
        await conn.close()
        return reply

    reply = run(scenario(), 120)
    assert reply.startswith(b"HTTP/1.0 200")
    run(machine.agent.exec("pkill -f 'http.server 8000'"))


CONNECT_8000 = "import socket; socket.create_connection(('127.0.0.1', 8000), 1).close()"
