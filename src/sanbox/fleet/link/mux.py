"""One connection to each guest agent, shared: a guest agent serves one host connection (its
channel is a serial port: a new connection ends the one before), yet several API nodes, and the
host agent itself, may each hold streams to one computer at once. So the host agent holds the
one connection and carries every other connection's streams over it.

A downstream connection (a tunnel from an API node, or the host agent's own in-process dial)
speaks the agent protocol (guest/protocol.py) as if to the guest: its HELLO is answered here
with the guest's own HELLO_ACK and the caller's nonce (a HELLO is never passed on: the guest
would end every stream). Each stream it opens gets an id of its own on the shared connection,
and every frame is passed with its id rewritten, both ways. Flow control stays per stream, end
to end, so what waits for a slow downstream is bounded by its streams' windows (and past
`MAX_BUFFERED`, that downstream is dropped, not the others). A downstream that ends has its
streams closed at the guest (a kept process detaches, as when a connection ends). When the
guest's connection ends (the VM stopped, paused, or its agent restarted) every downstream ends
with it, and the next one dials the guest again."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import socket
from typing import Any

from ...guest import protocol as p
from ...host.agent.dial import READ_LIMIT, Dial, Streams
from ...host.agent.handshake import handshake
from ...tasks import cancel_and_wait

log = logging.getLogger(__name__)

HELLO_WAIT = 30.0  # a downstream that sends no HELLO in this is dropped
DIAL_WAIT = 30.0  # the guest's connection: handshaken within this, or the downstream ends
MAX_BUFFERED = 16 << 20  # bytes waiting for one downstream before it is dropped
READ_SIZE = 256 * 1024


@dataclasses.dataclass(eq=False)
class _Down:
    writer: asyncio.StreamWriter
    streams: dict[int, int] = dataclasses.field(default_factory=dict)  # its id -> the guest's


class GuestMux:
    """The shared connection to one computer's guest agent."""

    def __init__(self, computer_id: str, dial: Dial) -> None:
        self.computer_id = computer_id
        self._dial = dial
        self._up: Streams | None = None
        self._hello: dict[str, Any] = {}
        self._reading: asyncio.Task[None] | None = None
        self._routes: dict[int, tuple[_Down, int]] = {}  # the guest's id -> (downstream, its id)
        self._downs: set[_Down] = set()
        self._ids = itertools.count(1)
        self._connecting = asyncio.Lock()

    @property
    def connected(self) -> bool:
        return self._up is not None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Carry one downstream connection until it or the guest's ends."""
        down = _Down(writer)
        decoder = p.Decoder(lenient=True)
        try:
            async with asyncio.timeout(HELLO_WAIT):
                frames = await self._greeted(reader, decoder)
            up = await self._connected()
            self._downs.add(down)
            self._answer(down, frames.pop(0))
            while True:
                if self._up is not up or down not in self._downs:
                    return  # the guest's connection ended, or this one was dropped
                for frame in frames:
                    self._upstream(down, frame, up[1])
                await up[1].drain()
                data = await reader.read(READ_SIZE)
                if not data:
                    return
                frames = decoder.feed(data)
                if decoder.errors:
                    raise p.ProtocolError(str(decoder.errors[0]))
        except (TimeoutError, OSError, p.ProtocolError, ConnectionError) as exc:
            log.info("agent stream of %s ended: %s", self.computer_id, exc)
        finally:
            self._drop(down)

    async def close(self) -> None:
        """End the guest's connection and every downstream."""
        if self._reading is not None:
            await cancel_and_wait(self._reading)
        self._reset()

    # the downstream side --------------------------------------------------------------------

    async def _greeted(self, reader: asyncio.StreamReader, decoder: p.Decoder) -> list[p.Frame]:
        """Frames from the downstream's first HELLO on (what came before it is skipped)."""
        while True:
            data = await reader.read(READ_SIZE)
            if not data:
                raise ConnectionError("closed before its HELLO")
            frames = decoder.feed(data)
            decoder.errors.clear()
            for i, frame in enumerate(frames):
                if isinstance(frame, p.Hello):
                    decoder.lenient = False
                    return frames[i:]

    def _answer(self, down: _Down, hello: p.Frame) -> None:
        assert isinstance(hello, p.Hello)
        body = {**self._hello, "nonce": hello.body.get("nonce")}
        down.writer.write(p.SYNC + p.encode(p.HelloAck(body)))

    def _upstream(self, down: _Down, frame: p.Frame, up: asyncio.StreamWriter) -> None:
        if isinstance(frame, p.Hello):  # a retried handshake: answered here, never passed on
            self._answer(down, frame)
            return
        if isinstance(frame, p.HelloAck):
            return
        if isinstance(frame, p.Open):
            if frame.stream in down.streams:
                return  # the guest would refuse it too; its id is in use on this downstream
            ours = next(self._ids)
            down.streams[frame.stream] = ours
            self._routes[ours] = (down, frame.stream)
            up.write(p.SYNC + p.encode(dataclasses.replace(frame, stream=ours)))
            return
        ours_or_none = down.streams.get(frame.stream)
        if ours_or_none is None:
            return  # a stream that ended already: late frames are normal
        if isinstance(frame, p.Close):
            del down.streams[frame.stream]
            self._routes.pop(ours_or_none, None)
        up.write(p.encode(dataclasses.replace(frame, stream=ours_or_none)))

    def _drop(self, down: _Down) -> None:
        """A downstream that ended: its streams closed at the guest, its connection closed."""
        self._downs.discard(down)
        up = self._up
        for ours in down.streams.values():
            self._routes.pop(ours, None)
            if up is not None:
                with contextlib.suppress(OSError, RuntimeError):
                    up[1].write(p.encode(p.Close(ours)))
        down.streams.clear()
        with contextlib.suppress(OSError, RuntimeError):
            down.writer.close()

    # the guest's side -------------------------------------------------------------------------

    async def _connected(self) -> Streams:
        async with self._connecting:
            if self._up is None:
                reader, writer = await self._dial()
                try:
                    loop = asyncio.get_running_loop()
                    decoder, hello = await handshake(reader, writer, loop.time() + DIAL_WAIT)
                except BaseException:
                    writer.close()
                    raise
                self._hello = {k: v for k, v in hello.items() if k != "nonce"}
                self._up = (reader, writer)
                self._reading = asyncio.ensure_future(self._read(reader, decoder))
            return self._up

    async def _read(self, reader: asyncio.StreamReader, decoder: p.Decoder) -> None:
        try:
            frames = decoder.feed(b"")
            while True:
                for frame in frames:
                    if not self._downstream(frame):
                        return
                data = await reader.read(READ_SIZE)
                if not data:
                    return
                frames = decoder.feed(data)
        except (OSError, p.ProtocolError, ConnectionError) as exc:
            log.info("the agent connection of %s ended: %s", self.computer_id, exc)
        finally:
            self._reset()

    def _downstream(self, frame: p.Frame) -> bool:
        """Pass a guest's frame on; False when the guest restarted (every downstream ends)."""
        restarted = isinstance(frame, p.HelloAck) or (
            isinstance(frame, p.Msg) and frame.body.get("code") == "handshake_required"
        )
        if restarted:
            return False
        route = self._routes.get(frame.stream)
        if route is None:
            return True
        down, theirs = route
        if isinstance(frame, p.Close):
            self._routes.pop(frame.stream, None)
            down.streams.pop(theirs, None)
        down.writer.write(p.encode(dataclasses.replace(frame, stream=theirs)))
        if down.writer.transport.get_write_buffer_size() > MAX_BUFFERED:
            log.warning("a stream reader of %s fell behind: dropped", self.computer_id)
            self._drop(down)
        return True

    def _reset(self) -> None:
        """The guest's connection ended: so does every downstream."""
        if self._up is not None:
            with contextlib.suppress(OSError, RuntimeError):
                self._up[1].close()
        self._up = None
        self._reading = None
        for down in list(self._downs):
            self._drop(down)
        self._routes.clear()


class GuestMuxes:
    """The host agent's shared guest connections, by computer."""

    def __init__(self) -> None:
        self._muxes: dict[str, GuestMux] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def mux(self, computer_id: str, dial: Dial) -> GuestMux:
        found = self._muxes.get(computer_id)
        if found is None:
            found = self._muxes[computer_id] = GuestMux(computer_id, dial)
        found._dial = dial  # a new VM of the computer (a start, a resume): its socket
        return found

    async def serve(
        self,
        computer_id: str,
        dial: Dial,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        await self.mux(computer_id, dial).serve(reader, writer)

    def dial(self, computer_id: str, dial: Dial) -> Dial:
        """A dial for this process's own streams to the computer's agent, through its mux."""

        async def through() -> Streams:
            ours, theirs = socket.socketpair()
            reader, writer = await asyncio.open_connection(sock=theirs, limit=READ_LIMIT)
            task = asyncio.ensure_future(self.serve(computer_id, dial, reader, writer))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return await asyncio.open_connection(sock=ours, limit=READ_LIMIT)

        return through

    async def forget(self, computer_id: str) -> None:
        """The computer's VM ended or went: its connection and streams end."""
        found = self._muxes.pop(computer_id, None)
        if found is not None:
            await found.close()

    async def close(self) -> None:
        for computer_id in list(self._muxes):
            await self.forget(computer_id)
        for task in list(self._tasks):
            task.cancel()
