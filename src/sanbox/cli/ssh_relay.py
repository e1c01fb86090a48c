"""What `sanbox ssh-proxy NAME` runs once its argument is read: one SSH connection's bytes between
stdin and stdout and the computer's sshd (OpenSSH's `ProxyCommand`). No typer here: the proxy's
fast path (sanbox.cli.fastpath) runs it without loading the command-line framework, on every
connection ssh, scp, rsync or an editor opens."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..sdk import AsyncSanbox, AsyncSshStream


async def proxy(client: AsyncSanbox, name: str) -> None:
    """The usual way: the computer looked up through the SDK, then its SSH stream piped."""
    async with client:
        computer = await client.computers.get(name)
        async with computer.ssh_stream() as stream:
            await pipe(stream)


async def pipe(stream: AsyncSshStream) -> None:
    """stdin -> stream and stream -> stdout until the server ends the connection. stdin is read
    in a thread (a pipe, a socket or a file alike), one chunk ahead of what was sent."""
    loop = asyncio.get_running_loop()
    chunks: asyncio.Queue[bytes] = asyncio.Queue()
    room = threading.Semaphore(1)  # a chunk is read only once the one before it was taken

    def read_stdin() -> None:
        while True:
            room.acquire()
            try:
                data = os.read(sys.stdin.fileno(), 65536)
            except OSError:
                data = b""
            try:  # (no coroutine made here: one the closed loop never ran would be reported)
                loop.call_soon_threadsafe(chunks.put_nowait, data)
            except RuntimeError:  # the loop closed: the relay ended
                return
            if not data:
                return

    async def upload() -> None:
        while data := await chunks.get():
            room.release()
            await stream.send(data)
        await stream.send_eof()

    threading.Thread(target=read_stdin, name="stdin", daemon=True).start()
    sender = asyncio.create_task(upload())
    out = sys.stdout.fileno()
    os.set_blocking(out, True)
    try:
        while data := await stream.recv():
            view = memoryview(data)
            while view:
                view = view[os.write(out, view) :]
    except BrokenPipeError:
        return  # ssh is gone
    finally:
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
