"""The raw walk of a build context's tar, before `tarfile` reads it: every 512-byte header is
counted (PAX and GNU long-name headers and directories too, which `tarfile` folds away), only
regular files, directories and bounded name headers are let through, and a gzip body is
decompressed with its output capped. Pure: bytes in, the plain tar out, or `TarScanError`.

Why not trust `tarfile` alone: it reads a PAX header's whole body into memory and makes a
`TarInfo` per header, so a small upload could make the server hold and walk far more than the
limits on files say (a 100k-directory tar, a PAX flood, a gzip bomb)."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

BLOCK = 512
MAX_HEADERS = 1024  # every header: files, directories, PAX and long-name headers
MAX_META_BYTES = 8 * 1024  # one PAX or GNU long-name header's body
MAX_NAME = 255  # characters of a path in the context
REGULAR = (b"0", b"\x00")
DIRECTORY = b"5"
META = (b"x", b"g", b"L")  # PAX (per file, global), GNU long name
GZIP_MAGIC = b"\x1f\x8b"


class TarScanError(ValueError):
    """A context tar refused before it is read: why."""


@dataclass(frozen=True)
class Limits:
    max_files: int
    max_bytes: int  # the files' bytes together
    max_tar_bytes: int  # the plain tar, decompressed


def plain(data: bytes, max_tar_bytes: int) -> bytes:
    """`data` as a plain tar: gzip is decompressed (at most `max_tar_bytes` out), other
    compressions are refused."""
    if not data.startswith(GZIP_MAGIC):
        if data[:3] == b"BZh" or data[:6] == b"\xfd7zXZ\x00" or data[:4] == b"\x28\xb5\x2f\xfd":
            raise TarScanError("the context is compressed: send a plain tar (or gzip)")
        return data
    inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflate.decompress(data, max_tar_bytes + 1)
    except zlib.error as exc:
        raise TarScanError(f"the context's gzip is damaged: {exc}") from None
    if len(out) > max_tar_bytes or inflate.unconsumed_tail:
        raise TarScanError(f"the context unpacks to over {max_tar_bytes >> 20} MiB of tar")
    if not inflate.eof or inflate.unused_data.strip(b"\x00"):
        raise TarScanError("the context's gzip is truncated or has more than one member")
    return out


def _size(field: bytes) -> int:
    text = field.rstrip(b"\x00 ").lstrip(b" ")
    if not text:
        return 0
    if field[0] & 0x80 or not text.isdigit() or set(text) - set(b"01234567"):
        raise TarScanError("a tar header has a size that is not plain octal")
    return int(text, 8)


def _checked(header: bytes) -> None:
    """The header's checksum (the sum of its bytes with the checksum field as spaces)."""
    field = header[148:156].rstrip(b"\x00 ").lstrip(b" ")
    unsigned = sum(header[:148]) + 8 * 32 + sum(header[156:])
    signed = unsigned - 2 * sum(b for b in header[:148] + header[156:] if b >= 128)
    if not field or set(field) - set(b"01234567") or int(field, 8) not in (unsigned, signed):
        raise TarScanError("the context is not a tar archive (a header's checksum is wrong)")


def scan(tar: bytes, limits: Limits) -> None:
    """Every header of the plain tar `tar`, against `limits`; TarScanError for the first that
    breaks one, or for a member that is not a regular file or a directory."""
    offset = headers = files = total = 0
    while offset + BLOCK <= len(tar):
        header = tar[offset : offset + BLOCK]
        if header.count(0) == BLOCK:
            return  # the end-of-archive blocks: tarfile stops here too
        headers += 1
        if headers > MAX_HEADERS:
            raise TarScanError(f"more than {MAX_HEADERS} tar headers in the context")
        _checked(header)
        kind, size = header[156:157], _size(header[124:136])
        if kind in REGULAR:
            files += 1
            total += size
            if files > limits.max_files:
                raise TarScanError(f"more than {limits.max_files} files in the context")
            if total > limits.max_bytes:
                raise TarScanError(f"the context is over {limits.max_bytes >> 20} MiB")
        elif kind in META:
            if size > MAX_META_BYTES:
                raise TarScanError(f"a tar name or PAX header is over {MAX_META_BYTES} bytes")
        elif kind != DIRECTORY:
            name = header[:100].split(b"\x00", 1)[0].decode(errors="replace")
            raise TarScanError(f"{name!r} is not a regular file (links and devices are refused)")
        offset += BLOCK + -(-size // BLOCK) * BLOCK
    if offset > len(tar) or offset == 0:
        raise TarScanError("the context is not a tar archive (truncated or empty)")
