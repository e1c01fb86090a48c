"""A local file written whole or not at all, for downloads (`files.download`, `sanbox cp`).

A download written straight into its target truncates the file that was there at its first
bytes: a transfer cut midway (the server gone, a network error, Ctrl-C) leaves neither the old
file nor the new one. The bytes go to a temporary file beside the target instead (same folder,
same filesystem), which takes the target's place with `os.replace` once every byte is in; on
failure it is removed and the old file is as it was."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

_TRIES = 100  # temporary names tried: each is another process's download, or a stale one


class WholeFile:
    """`with WholeFile(target) as out: out.write(piece)...`: the target replaced on a clean exit
    (an empty file if nothing was written: an empty file is a file too), untouched on an
    exception. The temporary file is made at the first write (or at the end), so a download
    refused before its first byte makes nothing. A target that is a link is written through,
    as `open(target, "wb")` did; a file that was there gives its permission bits to the new,
    unless `mode` says what they are (a file holding a key: 0600, whatever it was before). A
    target that is there and no regular file (`/dev/null`, `/dev/stdout`, a FIFO) is written
    straight into, as before: a file put in its place would replace the device itself."""

    def __init__(self, target: str | os.PathLike[str], mode: int | None = None) -> None:
        self._given = Path(target)
        self.target = Path(os.path.realpath(target))
        self.size = 0
        self._mode = mode
        self._file: BinaryIO | None = None
        self._temp: Path | None = None

    def __enter__(self) -> WholeFile:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if kind is None:
            self._commit()
        else:
            self._discard()

    def write(self, piece: bytes) -> None:
        self._open().write(piece)
        self.size += len(piece)

    def _open(self) -> BinaryIO:
        if self._file is not None:
            return self._file
        try:
            kind = os.stat(self._given).st_mode  # through links, as open() goes
        except FileNotFoundError:
            kind = stat.S_IFREG
        if stat.S_ISDIR(kind):
            raise IsADirectoryError(21, "Is a directory", str(self._given))
        if not stat.S_ISREG(kind):  # by the name given: /dev/stdout's link names no path
            self._file = self._given.open("wb")
            return self._file
        mode = 0o666 if self._mode is None else self._mode  # 0o666: as open("wb"), less umask
        if self._mode is None:
            with contextlib.suppress(FileNotFoundError):
                mode = stat.S_IMODE(self.target.stat().st_mode) & 0o777
        for n in range(_TRIES):
            temp = self.target.with_name(f".{self.target.name}.{os.getpid()}-{n}.part")
            try:
                fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            except FileExistsError:
                continue
            except OSError as exc:  # named by its target: the user never named the temp
                raise type(exc)(exc.errno, exc.strerror, str(self.target)) from exc
            self._temp = temp
            if mode != 0o666:
                os.fchmod(fd, mode)  # the umask may have taken bits asked for
            self._file = os.fdopen(fd, "wb")
            return self._file
        raise FileExistsError(17, f"{_TRIES} temporary files beside it", str(self.target))

    def _commit(self) -> None:
        file = self._open()
        try:
            file.close()
            if self._temp is not None:  # else written straight into (no regular file)
                os.replace(self._temp, self.target)
        except BaseException:
            self._discard()
            raise
        self._temp = None

    def _discard(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._temp is not None:
            self._temp.unlink(missing_ok=True)
            self._temp = None
