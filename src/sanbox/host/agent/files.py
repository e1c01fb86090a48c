"""Files in the guest: streamed put/get and small metadata calls."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator
from dataclasses import dataclass

from sanbox.guest import protocol as p

from . import reply
from .channel import Requests
from .errors import InvalidPathError, RemoteError

Source = bytes | str | os.PathLike[str] | AsyncIterable[bytes]

# the agent grants a put credit as it writes the file: none for this long, and it stopped
PUT_STALL = 60.0


MAX_NAME = 256  # an owner's or group's name, as the guest says it
MAX_TARGET = 4096  # a symbolic link's target path (Linux's PATH_MAX)
TYPES = ("file", "dir", "symlink", "other")


def _name(value: object, what: str) -> str | None:
    name = None if value is None else reply.text(value, what)
    if name is not None and not 0 < len(name) <= MAX_NAME:
        raise reply.bad_reply(what, f"a name of 1 to {MAX_NAME} characters")
    return name


def _target(value: object) -> str | None:
    target = None if value is None else reply.text(value, "link target")
    if target is not None and not (target.startswith("/") and len(target) <= MAX_TARGET):
        raise reply.bad_reply("link target", f"an absolute path of {MAX_TARGET} bytes at most")
    return target


def _kind(value: object, what: str) -> str | None:
    if value is not None and value not in TYPES:
        raise reply.bad_reply(what, " or ".join(TYPES))
    return None if value is None else str(value)


@dataclass(frozen=True)
class FileInfo:
    name: str
    path: str
    type: str  # "file", "dir", "symlink" or "other"
    size: int
    mode: int
    mtime: float
    uid: int
    gid: int
    st_mode: int | None = None  # with the type bits; None from an agent before it
    owner: str | None = None  # the account's name; None: none in the guest (or an older agent)
    group: str | None = None
    # a symbolic link's (from an agent that says them): its target with every link resolved
    # (its own path if it does not resolve), and the type and permission bits found there
    # (None: nothing there)
    target: str | None = None
    target_type: str | None = None
    target_mode: int | None = None

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"

    @property
    def is_file(self) -> bool:
        return self.type == "file"

    @classmethod
    def from_body(cls, body: object) -> FileInfo:
        info = reply.record(body, "file info")
        return cls(
            name=reply.text(info.get("name"), "file name"),
            path=reply.text(info.get("path"), "file path"),
            type=reply.text(info.get("type"), "file type"),
            size=reply.integer(info.get("size"), "file size"),
            mode=reply.integer(info.get("mode"), "file mode"),
            mtime=reply.number(info.get("mtime"), "file mtime"),
            uid=reply.integer(info.get("uid"), "file uid"),
            gid=reply.integer(info.get("gid"), "file gid"),
            st_mode=reply.optional_integer(info.get("st_mode"), "file st_mode"),
            owner=_name(info.get("owner"), "file owner"),
            group=_name(info.get("group"), "file group"),
            target=_target(info.get("target")),
            target_type=_kind(info.get("target_type"), "link target's type"),
            target_mode=reply.optional_integer(info.get("target_mode"), "link target's mode"),
        )


def check_path(path: str) -> str:
    """Reject relative paths and ``..`` before anything is sent."""
    problem = p.path_problem(path)
    if problem is not None:
        raise InvalidPathError("invalid_path", problem)
    return path


async def _chunks(source: Source) -> AsyncIterator[bytes]:
    if isinstance(source, bytes | bytearray | memoryview):
        data = bytes(source)
        for start in range(0, len(data), p.CHUNK):
            yield data[start : start + p.CHUNK]
    elif isinstance(source, str | os.PathLike):
        with open(source, "rb") as f:
            while chunk := f.read(p.CHUNK):
                yield chunk
    else:
        async for chunk in source:
            for start in range(0, len(chunk), p.CHUNK):
                yield chunk[start : start + p.CHUNK]


class Files:
    """``client.files``: operations on the guest filesystem."""

    def __init__(self, client: Requests) -> None:
        self._client = client

    async def put(
        self,
        remote_path: str,
        source: Source,
        *,
        mode: int | None = 0o644,
        uid: int | None = None,
        gid: int | None = None,
        make_parents: bool = True,
    ) -> int:
        """Write ``source`` to ``remote_path`` atomically; return the bytes written. ``mode``
        None: a file that is there keeps its mode and owner (a new one is 0644)."""
        params: dict[str, object] = {
            "op": "put",
            "path": check_path(remote_path),
            "uid": uid,
            "gid": gid,
        }
        if mode is not None:  # (an agent before this keeps 0644 for every file)
            params["mode"] = mode
        params["make_parents"] = make_parents
        channel = await self._client.open("file", params)
        try:
            async for chunk in _chunks(source):
                if not await channel.send_data(p.STDIN, chunk, PUT_STALL):
                    break  # the agent gave up; its error follows
            else:
                await channel.send(p.Eof(channel.id, p.STDIN))
            body = await channel.next_msg(timeout=None if channel.remote_closed else 120.0)
            if body is None or body.get("type") != "result":
                raise RemoteError("bad_reply", f"unexpected reply to put: {body!r}")
            return reply.integer(body.get("size"), "size written")
        finally:
            await channel.close()

    def get(self, remote_path: str, *, timeout: float = 60.0) -> AsyncGenerator[bytes, None]:
        """Stream the file's bytes in chunks (at most ``protocol.CHUNK`` each).

        ``timeout`` bounds each wait for the next chunk. The path is checked now.
        """
        return self._get(check_path(remote_path), timeout)

    async def _get(self, path: str, timeout: float) -> AsyncGenerator[bytes, None]:
        channel = await self._client.open("file", {"op": "get", "path": path})
        try:
            while (frame := await channel.next(timeout)) is not None:
                if isinstance(frame, p.Data) and frame.data:
                    yield frame.data
                elif isinstance(frame, p.Msg):
                    channel.raise_if_error(frame.body)
                    if frame.body.get("type") == "result":
                        return
            raise RemoteError("bad_reply", "file stream ended without a result")
        finally:
            await channel.close()

    async def get_to(self, remote_path: str, local_path: str | os.PathLike[str]) -> int:
        size = 0
        with open(local_path, "wb") as f:
            async for chunk in self.get(remote_path):
                f.write(chunk)
                size += len(chunk)
        return size

    async def read(self, remote_path: str, *, most: int | None = None) -> bytes:
        """The whole file; with `most`, read no further than that many bytes (a guest's file
        may be a link to /dev/zero): RemoteError `file_too_large` past it."""
        data = bytearray()
        async with contextlib.aclosing(self.get(remote_path)) as chunks:
            async for chunk in chunks:
                data += chunk
                if most is not None and len(data) > most:
                    raise RemoteError(
                        "file_too_large", f"{remote_path} is over {most >> 20} MiB: not read on"
                    )
        return bytes(data)

    async def mkdir(self, path: str, parents: bool = True) -> FileInfo:
        body = await self._client.call(
            "file", {"op": "mkdir", "path": check_path(path), "parents": parents}
        )
        return FileInfo.from_body(body.get("info"))

    async def list(self, path: str) -> list[FileInfo]:
        body = await self._client.call("file", {"op": "list", "path": check_path(path)})
        return [FileInfo.from_body(e) for e in reply.items(body.get("entries"), "listing")]

    async def stat(self, path: str, follow: bool = True) -> FileInfo:
        """The file at `path`; `follow=False`: a symbolic link itself, with its target (an agent
        before it answers for what the link points to, as with `follow`)."""
        params: dict[str, object] = {"op": "stat", "path": check_path(path)}
        if not follow:
            params["follow"] = False
        body = await self._client.call("file", params)
        return FileInfo.from_body(body.get("info"))

    async def remove(self, path: str, recursive: bool = False) -> None:
        await self._client.call(
            "file", {"op": "remove", "path": check_path(path), "recursive": recursive}
        )
