"""A template build's log: one JSON object per line in `templates/<template id>.log` under the
data dir, written as the build goes and read back by `sanbox template logs` (and followed while
it runs). Bounded: a line of output keeps its first 4 KiB, and past 8 MiB output lines are
dropped (said once) while the build's own events (steps, result) are still written.

    {"type": "step", "index": 2, "total": 5, "description": "apt install jq", "cached": false}
    {"type": "output", "text": "Setting up jq ..."}
    {"type": "done", "state": "ready", "message": "..."}   # or "failed", with the reason
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

MAX_LINE = 4096
MAX_BYTES = 8 * 1024 * 1024
FINAL = ("done",)


class BuildLog:
    def __init__(self, path: Path, max_bytes: int = MAX_BYTES) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self._size = 0
        self._dropping = False

    def start(self) -> None:
        """A new build: the last build's log is replaced."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".log.tmp")
        tmp.write_bytes(b"")
        os.replace(tmp, self.path)
        self._size, self._dropping = 0, False

    def event(self, type_: str, **fields: Any) -> None:
        self._write({"type": type_, "time": round(time.time(), 3), **fields})

    async def follow(self, events: AsyncIterator[object], tail: list[str]) -> object:
        """A step's output events into the log, line by line (its last lines kept in `tail`);
        the event that is not output (its exit), the last one."""
        pending = b""
        last: object = None
        async for ev in events:
            data = getattr(ev, "data", None)
            if not isinstance(data, bytes):
                last = ev
                continue
            pending += data
            *done, pending = pending.split(b"\n")
            for line in done:
                text = line.decode(errors="replace")
                self.output(text)
                tail.append(text)
                del tail[:-5]
            if len(pending) > 4096:
                self.output(pending.decode(errors="replace"))
                pending = b""
        if pending:
            self.output(pending.decode(errors="replace"))
        return last

    def output(self, text: str) -> None:
        for line in text.splitlines():
            if self._size >= self.max_bytes:
                if not self._dropping:
                    self._dropping = True
                    self._write(
                        {
                            "type": "output",
                            "text": "[sanbox] log limit reached: "
                            "further output of this build is not kept",
                        }
                    )
                return
            self._write({"type": "output", "text": line[:MAX_LINE]})

    def _write(self, record: dict[str, Any]) -> None:
        data = (json.dumps(record) + "\n").encode()
        with open(self.path, "ab") as f:
            f.write(data)
        self._size += len(data)


def read(path: Path, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """The complete records from byte `offset` on, and the offset after them."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    records = []
    for line in data[:end].splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records, offset + end


def json_line(record: dict[str, Any]) -> str:
    return json.dumps(record) + "\n"


def render(record: dict[str, Any]) -> str:
    """One record as a line for people."""
    kind = record.get("type")
    if kind == "step":
        cached = " (cached: reusing its layer)" if record.get("cached") else ""
        return f"step {record.get('index')}/{record.get('total')}: {record.get('description')}" + (
            cached
        )
    if kind == "output":
        return f"  {record.get('text', '')}"
    if kind == "done":
        return f"build {record.get('state')}: {record.get('message', '')}"
    return str(record.get("message", kind))


def lines(records: list[dict[str, Any]]) -> Iterator[str]:
    for record in records:
        yield render(record)
