"""A writer for the cpio `newc` format the kernel unpacks as an initramfs (pure: writes a sink)."""

from __future__ import annotations

import stat
from typing import BinaryIO

_TRAILER = "TRAILER!!!"


class CpioWriter:
    def __init__(self, sink: BinaryIO) -> None:
        self._sink = sink
        self._ino = 1

    def _entry(self, name: str, mode: int, data: bytes = b"") -> None:
        encoded = name.encode() + b"\0"
        fields = [self._ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(encoded), 0]
        self._ino += 1
        header = b"070701" + b"".join(b"%08X" % f for f in fields)
        self._write_padded(header + encoded)
        self._write_padded(data)

    def _write_padded(self, data: bytes) -> None:
        self._sink.write(data)
        self._sink.write(b"\0" * (-len(data) % 4))

    def directory(self, name: str, mode: int = 0o755) -> None:
        self._entry(name, stat.S_IFDIR | mode)

    def file(self, name: str, data: bytes, mode: int = 0o644) -> None:
        self._entry(name, stat.S_IFREG | mode, data)

    def symlink(self, name: str, target: str) -> None:
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def close(self) -> None:
        self._entry(_TRAILER, 0)
