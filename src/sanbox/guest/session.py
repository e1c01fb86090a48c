"""The agent's session: decodes frames from the current host link and routes them to streams."""

from __future__ import annotations

import logging
from typing import Protocol

from . import protocol as p
from .control import ControlStream, identity, set_clock
from .errors import AgentRequestError
from .files import FileStream
from .keeper import Keeper
from .kept import KeptStream, wants_keep
from .process import ExecStream, PtyStream
from .ssh import SshStream
from .stream import Stream
from .tcp import TcpStream
from .watch import WatchStream

log = logging.getLogger("sanbox.agent")

KINDS: dict[str, type[Stream]] = {
    cls.kind: cls
    for cls in (ExecStream, PtyStream, FileStream, TcpStream, SshStream, ControlStream, WatchStream)
}


class Link(Protocol):
    """A connection to the host that frames are written to."""

    def write(self, data: bytes) -> None: ...

    def close(self) -> None: ...


class Session:
    """Stream table plus the decoder for whichever host link is attached.

    A host attaches, sends SYNC + HELLO; the session resets its stream table
    (ending in-flight streams, not processes they left in the background) and
    answers SYNC + HELLO_ACK. Frames other than HELLO before that are dropped.
    Kept processes (keeper.py) outlive all of that: a link's end only detaches them.
    """

    def __init__(self, keeper: Keeper | None = None) -> None:
        self.keeper = keeper or Keeper()
        self.link: Link | None = None
        self.streams: dict[int, Stream] = {}
        self._decoder = p.Decoder(lenient=True)
        self._greeted = False

    def attach(self, link: Link) -> None:
        old, self.link = self.link, link
        self._decoder.reset()
        self._greeted = False
        if old is not None and old is not link:
            old.close()
        log.info("host attached")

    def detach(self, link: Link) -> None:
        if self.link is link:
            self.link = None
            self._decoder.reset()
            self._greeted = False
            self.keeper.detach_all()  # their output is held from now on, not sent to nobody
            log.info("host detached")

    @staticmethod
    def announcement() -> bytes:
        """What a (re)started agent says first: an unsolicited HELLO_ACK with no nonce. A host
        connected to the previous agent fails its pending calls at once instead of waiting."""
        body = {"nonce": None, "restarted": True, "protocol": p.PROTOCOL_VERSION, **identity()}
        return p.SYNC + p.encode(p.HelloAck(body))

    def send(self, *frames: p.Frame) -> None:
        if self.link is not None:
            self.link.write(b"".join(map(p.encode, frames)))

    def feed(self, data: bytes) -> None:
        frames = self._decoder.feed(data)
        for error in self._decoder.errors:
            log.warning("malformed input, resyncing: %s", error)
        self._decoder.errors.clear()
        for frame in frames:
            try:
                self.dispatch(frame)
            except Exception:
                log.exception("failed to handle %r", frame)

    def reset(self) -> None:
        for stream in list(self.streams.values()):
            stream.abort()
        self.streams.clear()

    def dispatch(self, frame: p.Frame) -> None:
        if isinstance(frame, p.Hello):
            self.reset()
            self._greeted = True
            nonce = frame.body.get("nonce")
            body = {"nonce": nonce, "protocol": p.PROTOCOL_VERSION, **identity()}
            when = frame.body.get("time")
            if isinstance(when, int | float) and not isinstance(when, bool):
                body["clock_set"] = self._set_clock(float(when))
            if self.link is not None:
                self.link.write(p.SYNC + p.encode(p.HelloAck(body)))
            log.info("handshake %s", nonce)
            return
        if not self._greeted:
            if isinstance(frame, p.Open):  # a host from before an agent restart: tell it so
                self._refuse(
                    frame.stream,
                    "handshake_required",
                    "the agent restarted: reconnect and handshake again",
                )
            return
        if isinstance(frame, p.Open):
            self._open(frame)
            return
        stream = self.streams.get(frame.stream)
        if stream is None:
            return  # a stream that already ended; late frames are normal
        if isinstance(frame, p.Data):
            stream.on_data(frame.channel, frame.data)
        elif isinstance(frame, p.Eof):
            stream.on_eof(frame.channel)
        elif isinstance(frame, p.Msg):
            stream.on_msg(frame.body)
        elif isinstance(frame, p.Window):
            stream.on_window(frame.credit)
        elif isinstance(frame, p.Close):
            del self.streams[frame.stream]
            stream.abort()

    @staticmethod
    def _set_clock(when: float) -> bool:
        """A HELLO's `time`, the host's clock as it sent it: a resumed guest's clock is set in
        the handshake, not in a round trip of its own to a guest that is still cold. False: not
        set (the host then asks with `set_clock`, which says why)."""
        try:
            set_clock(when)
        except AgentRequestError as exc:
            log.warning("clock not set from the handshake: %s", exc)
            return False
        return True

    def _refuse(self, stream: int, code: str, message: str, *, close: bool = True) -> None:
        self.send(p.Msg(stream, {"type": "error", "code": code, "message": message}))
        if close:
            self.send(p.Close(stream))

    def _open(self, frame: p.Open) -> None:
        def refuse(code: str, message: str, *, close: bool = True) -> None:
            self._refuse(frame.stream, code, message, close=close)

        if frame.stream in self.streams:
            refuse("stream_in_use", f"stream {frame.stream} is already open", close=False)
            return
        cls = KINDS.get(frame.kind)
        if frame.kind == KeptStream.kind or wants_keep(frame.kind, frame.params):
            stream: Stream = KeptStream(
                frame.stream, frame.params, self.send, self.keeper, frame.kind
            )
        elif cls is None:
            refuse("unknown_kind", f"unknown stream kind {frame.kind!r}")
            return
        else:
            stream = cls(frame.stream, frame.params, self.send)
        stream.on_finished = self._finished
        self.streams[frame.stream] = stream
        stream.start()

    def _finished(self, stream: Stream) -> None:
        if self.streams.get(stream.id) is stream:
            del self.streams[stream.id]
