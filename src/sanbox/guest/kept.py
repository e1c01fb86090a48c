"""Streams over kept processes (keeper.py), added in protocol 2.

- ``exec`` or ``pty`` with ``"keep": true`` (and an optional ``tag``): start a kept process,
  answer ``started {pid}``, then serve it as ``attach`` does. Ending the stream, or the host's
  connection, leaves the process running.
- ``kept`` with ``op``:
  - ``list``: ``result {processes: [{pid, kind, cmd, tag?, running, attached, exit_code?,
    signal?}]}``;
  - ``attach {pid, delivered: {"1": n, "2": n}}``: ``attached {pid, kind, lost: {"1": n}}``
    (bytes of a channel the host never got and the agent no longer holds), then the process's
    held output from what the host already has (``delivered``, by channel), live output, and
    ``exit`` once it ended; DATA on stdin, EOF, ``signal`` and ``resize`` as an exec or pty
    stream takes them. One stream at a time per process (``already_attached``);
  - ``forget {pid}``: ``result {forgotten}``: drop an exited process's record.
"""

from __future__ import annotations

import signal
from typing import Any

from . import protocol as p
from .errors import AgentRequestError
from .keeper import Keeper, KeptProcess
from .process import parse_signal, set_winsize
from .stream import Send, Stream

KEEP_KINDS = ("exec", "pty")


def wants_keep(kind: str, params: p.JsonDict) -> bool:
    return kind in KEEP_KINDS and params.get("keep") is True


def _delivered(value: object) -> dict[int, int]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise AgentRequestError("bad_request", "delivered maps channels to byte counts")
    out: dict[int, int] = {}
    for channel, count in value.items():
        if channel not in ("1", "2") or not isinstance(count, int) or isinstance(count, bool):
            raise AgentRequestError("bad_request", "delivered maps channels to byte counts")
        out[int(channel)] = count
    return out


class KeptStream(Stream):
    kind = "kept"

    def __init__(
        self, stream_id: int, params: p.JsonDict, send: Send, keeper: Keeper, opened_as: str
    ) -> None:
        super().__init__(stream_id, params, send)
        self.keeper = keeper
        self.opened_as = opened_as
        self.process: KeptProcess | None = None

    async def run(self) -> None:
        if self.opened_as in KEEP_KINDS:
            kept = self.keeper.spawn(self.opened_as, self.params)
            self.send_msg("started", pid=kept.pid)
            await self._serve(kept, {})
            return
        op = self.params.get("op")
        if op == "list":
            self.send_msg("result", processes=self.keeper.listing())
        elif op == "forget":
            self.send_msg("result", forgotten=self.keeper.forget(self.params.get("pid")))
        elif op == "attach":
            kept = self.keeper.get(self.params.get("pid"))
            if kept.attachment is not None:
                raise AgentRequestError("already_attached", f"process {kept.pid} is attached")
            await self._serve(kept, _delivered(self.params.get("delivered")))
        else:
            raise AgentRequestError("bad_request", f"unknown kept op {op!r}")

    async def _serve(self, kept: KeptProcess, delivered: dict[int, int]) -> None:
        lost = kept.log.start(delivered)
        kept.attachment = self
        self.process = kept
        if self.opened_as not in KEEP_KINDS:
            found = {str(channel): count for channel, count in lost.items()}
            self.send_msg("attached", pid=kept.pid, kind=kept.kind, lost=found)
        self.task(self._feed_stdin(kept))
        while True:
            if not kept.log.pending():
                if kept.exit is not None:
                    break
                kept.changed.clear()
                await kept.changed.wait()
                continue
            want = await self.send_window.take(p.CHUNK)
            piece = kept.log.take(want)
            self.send_window.refund(want - (len(piece[1]) if piece else 0))
            if piece is not None:
                self.send(p.Data(self.id, piece[0], piece[1]))
                kept.space.set()
        self.send_msg("exit", **kept.exit)

    async def _feed_stdin(self, kept: KeptProcess) -> None:
        while (data := await self.inbox.get()) is not None:
            await kept.write_stdin(data)
            self.consumed(len(data))
        kept.close_stdin()

    def on_msg(self, body: p.JsonDict) -> None:
        kept = self.process
        if kept is None:
            super().on_msg(body)
        elif body.get("type") == "signal":
            try:
                kept.signal(parse_signal(body.get("signal")))
            except AgentRequestError as exc:
                self.send_error(exc.code, exc.message)
        elif body.get("type") == "resize":
            self._resize(kept, body)
        else:
            super().on_msg(body)

    def _resize(self, kept: KeptProcess, body: dict[str, Any]) -> None:
        rows, cols = body.get("rows"), body.get("cols")
        if not (isinstance(rows, int) and isinstance(cols, int) and rows > 0 and cols > 0):
            self.send_error("bad_request", "resize needs positive integer rows and cols")
        elif (terminal := kept.terminal) is not None:
            set_winsize(terminal, rows, cols)
            kept.signal(signal.SIGWINCH)

    def cleanup(self) -> None:
        kept = self.process
        if kept is not None and kept.attachment is self:
            kept.attachment = None
            kept.log.stop()
            kept.space.set()
