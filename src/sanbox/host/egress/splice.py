"""A checked flow's bytes moved by the kernel: `os.splice` takes them from one TCP socket into a
pipe and from the pipe into the other socket, never through Python's memory. A short read (a
message rather than a stream: a request, an answer) is copied through one 16 KiB buffer
instead, which costs less than setting a splice up; a read that fills it turns splicing on
until a read comes back short again.

A flow gets here after its check, as asyncio streams. What a reader holds already and what a
writer has not sent yet go first, through the streams; then the stream's transport stops
reading, and the bytes move between duplicates of the two sockets (asyncio watches one
descriptor for one owner: its transport keeps the original). Only plain TCP sockets on both
sides qualify (`spliceable`); TLS the proxy terminates goes through Python (relay.py).

Bounds: one pipe of 256 KiB per direction (a bulk splice moves up to that much at once, which
costs the proxy about 30% less CPU per byte than the kernel's default 64 KiB pipe); the caller's
idle timeout still ends a flow where nothing moves. A flow the proxy cuts (`Flow.close`) shuts
its sockets down, which ends the splices too.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import socket
from collections.abc import AsyncIterator, Callable

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
CHUNK = 256 * 1024  # a bulk splice's most, and its pipe's capacity
SMALL = 16 * 1024  # reads up to this size are copied: cheaper than a splice for a small message
FAIR_TURNS = 16  # splices in a row before the relay lets the event loop run others
_FLAGS = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK


def spliceable(*sides: Streams) -> bool:
    """Every side a plain TCP socket (no TLS on it), on a kernel and Python with splice."""
    for _, writer in sides:
        sock = writer.get_extra_info("socket")
        if sock is None or writer.get_extra_info("ssl_object") is not None:
            return False
        if sock.type != socket.SOCK_STREAM or sock.family not in (socket.AF_INET, socket.AF_INET6):
            return False
    return hasattr(os, "splice")


async def both_ways(a: Streams, b: Streams, touch: Callable[[], None]) -> None:
    """Each side's bytes to the other until each has ended its sending (then the other's
    sending side is shut, as `write_eof` does); a broken side shuts both down."""
    async with _taken(a) as fa, _taken(b) as fb:
        await asyncio.gather(_until_eof(a, fa, b, fb, touch), _until_eof(b, fb, a, fa, touch))


async def exactly(src: Streams, dst: Streams, count: int, touch: Callable[[], None]) -> int:
    """`count` bytes from `src` to `dst` (a body of known length); how many moved, fewer only if
    `src` ended first."""
    async with _taken(src) as fs, _taken(dst, reading=False) as fd:
        return await _move(src, fs, dst, fd, count, touch)


async def until_eof(src: Streams, dst: Streams, touch: Callable[[], None]) -> int:
    """Everything `src` sends until it ends its sending, to `dst` (a body the upstream ends by
    closing); how many bytes moved."""
    async with _taken(src) as fs, _taken(dst, reading=False) as fd:
        return await _move(src, fs, dst, fd, None, touch)


# one direction -----------------------------------------------------------------------------


async def _until_eof(
    src: Streams, fs: socket.socket, dst: Streams, fd: socket.socket, touch: Callable[[], None]
) -> None:
    try:
        await _move(src, fs, dst, fd, None, touch)
    except OSError:  # a side broke: nothing more moves either way
        _shut(fs, socket.SHUT_RDWR)
        _shut(fd, socket.SHUT_RDWR)
        return
    _shut(fd, socket.SHUT_WR)


async def _move(
    src: Streams,
    fs: socket.socket,
    dst: Streams,
    fd: socket.socket,
    count: int | None,
    touch: Callable[[], None],
) -> int:
    """Bytes from `fs` to `fd` until EOF (count None) or `count` of them; how many moved."""
    moved = 0
    held = _held(src[0])  # what the stream read already goes first
    if count is not None:
        held, extra = held[:count], held[count:]
        _give_back(src[0], extra)
    if held:
        dst[1].write(held)
        moved += len(held)
    await _sent(dst[1])
    if count is not None and moved >= count:
        return moved
    loop = asyncio.get_running_loop()
    readable = _Readable(loop, fs.fileno())
    small = memoryview(bytearray(SMALL))
    turns = 0
    r, w, capacity = _pipe()
    try:
        drained = False  # the last read took less than asked: the socket is likely empty
        bulk = False  # the last read filled its buffer: more is likely waiting
        while count is None or moved < count:
            want = capacity if count is None else min(capacity, count - moved)
            if not bulk:
                want = min(want, SMALL)
            if drained:  # wait first rather than fail a read (the selector says if it is not)
                await readable.wait()
            try:
                got = (
                    os.splice(fs.fileno(), w, want, flags=_FLAGS)
                    if bulk
                    else fs.recv_into(small, want)
                )
            except BlockingIOError:
                drained = True
                continue
            if got == 0:
                break  # src ended its sending
            drained = got < want
            touch()
            turns += 1
            if turns % FAIR_TURNS == 0:
                await asyncio.sleep(0)  # a sender that never pauses leaves the loop its turn
            if bulk:
                pending = got
                while pending:
                    try:
                        pending -= os.splice(r, fd.fileno(), pending, flags=_FLAGS)
                    except BlockingIOError:
                        readable.stop()
                        await _writable(loop, fd.fileno())
            else:
                out = small[:got]
                while out:
                    try:
                        out = out[fd.send(out) :]
                    except BlockingIOError:
                        readable.stop()
                        await _writable(loop, fd.fileno())
            bulk = not drained
            moved += got
    finally:
        readable.stop()
        os.close(r)
        os.close(w)
    return moved


def _pipe() -> tuple[int, int, int]:
    """A non-blocking pipe (read end, write end) and how many bytes it holds: `CHUNK`, or the
    kernel's default where the user's pipe allowance is spent."""
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    with contextlib.suppress(OSError):
        fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, CHUNK)
    return r, w, min(CHUNK, fcntl.fcntl(w, fcntl.F_GETPIPE_SZ))


class _Readable:
    """Waits for a descriptor to become readable. It stays registered with the loop from one
    wait to the next (a message each way costs no epoll_ctl), and is unregistered while the
    splice waits to write: the selector is level-triggered, and a source left readable would
    wake the loop at every turn."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        self._loop, self._fd = loop, fd
        self._waiter: asyncio.Future[None] | None = None
        self._watched = False

    async def wait(self) -> None:
        if not self._watched:
            self._loop.add_reader(self._fd, self._wake)
            self._watched = True
        self._waiter = self._loop.create_future()
        await self._waiter

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def stop(self) -> None:
        if self._watched:
            self._loop.remove_reader(self._fd)
            self._watched = False


# the streams' parts ------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _taken(side: Streams, reading: bool = True) -> AsyncIterator[socket.socket]:
    """A duplicate of the side's socket, closed at the end; if the splice reads it, its
    transport reads no more."""
    writer = side[1]
    transport = writer.transport
    assert isinstance(transport, asyncio.ReadTransport)  # a stream's transport reads and writes
    if reading:
        transport.pause_reading()
    sock = socket.socket(fileno=os.dup(writer.get_extra_info("socket").fileno()))
    sock.setblocking(False)
    try:
        yield sock
    finally:
        sock.close()


def _held(reader: asyncio.StreamReader) -> bytes:
    """What the reader has buffered and nobody read yet. asyncio has no public call for it: its
    buffer (`_buffer`, a bytearray since Python 3.4) is read and emptied here, in one place."""
    buffer: bytearray = getattr(reader, "_buffer")  # noqa: B009
    held = bytes(buffer)
    buffer.clear()
    return held


def _give_back(reader: asyncio.StreamReader, data: bytes) -> None:
    if data:
        buffer: bytearray = getattr(reader, "_buffer")  # noqa: B009
        buffer[:0] = data


async def _sent(writer: asyncio.StreamWriter) -> None:
    """Until the writer's transport has handed every byte it holds to the kernel (`drain` alone
    waits only down to the high-water mark)."""
    transport = writer.transport
    if transport.get_write_buffer_size() == 0:
        return
    transport.set_write_buffer_limits(high=0)
    try:
        await writer.drain()
    finally:
        transport.set_write_buffer_limits()


async def _writable(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    fut: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not fut.done():
            fut.set_result(None)

    loop.add_writer(fd, wake)
    try:
        await fut
    finally:
        loop.remove_writer(fd)


def _shut(sock: socket.socket, how: int) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(how)
