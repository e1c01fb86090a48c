"""``file`` streams: put, get, mkdir, list, stat (of a link, or what it points to), remove."""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import shutil
import stat
import tempfile
from typing import Any

from . import protocol as p
from .errors import AgentRequestError
from .stream import Stream, param_int


def check_path(path: object) -> str:
    problem = p.path_problem(path)
    if problem is not None:
        raise AgentRequestError("invalid_path", problem)
    assert isinstance(path, str)
    return os.path.normpath(path)


def _type_name(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


class Names:
    """Account and group names by id, looked up once per call (a listing of many files of one
    owner reads the account files once); None for an id with no name."""

    def __init__(self) -> None:
        self._users: dict[int, str | None] = {}
        self._groups: dict[int, str | None] = {}

    def user(self, uid: int) -> str | None:
        if uid not in self._users:
            try:
                self._users[uid] = pwd.getpwuid(uid).pw_name
            except (KeyError, OverflowError):
                self._users[uid] = None
        return self._users[uid]

    def group(self, gid: int) -> str | None:
        if gid not in self._groups:
            try:
                self._groups[gid] = grp.getgrgid(gid).gr_name
            except (KeyError, OverflowError):
                self._groups[gid] = None
        return self._groups[gid]


def _link_target(path: str) -> dict[str, Any]:
    """A symbolic link's target, as envd says it: the path with every link resolved (the link's
    own path if it does not resolve), and what is there (type and permission bits; None for
    nothing)."""
    try:
        target = os.path.realpath(path, strict=True)
        st = os.stat(target)
    except (OSError, RuntimeError, ValueError):
        return {"target": path, "target_type": None, "target_mode": None}
    return {
        "target": target,
        "target_type": _type_name(st.st_mode),
        "target_mode": stat.S_IMODE(st.st_mode),
    }


def file_info(
    path: str, st: os.stat_result, name: str | None = None, names: Names | None = None
) -> dict[str, Any]:
    """A file's facts; `st_mode` (type bits included) and the owner's and group's names are
    what an agent before them did not send (a name the guest has none for is left out), and so
    is a symbolic link's target (`_link_target`)."""
    names = names if names is not None else Names()
    info: dict[str, Any] = {
        "name": name if name is not None else (os.path.basename(path) or "/"),
        "path": path,
        "type": _type_name(st.st_mode),
        "size": st.st_size,
        "mode": stat.S_IMODE(st.st_mode),
        "st_mode": st.st_mode,
        "mtime": st.st_mtime,
        "uid": st.st_uid,
        "gid": st.st_gid,
    }
    owner, group = names.user(st.st_uid), names.group(st.st_gid)
    if owner is not None:
        info["owner"] = owner
    if group is not None:
        info["group"] = group
    if stat.S_ISLNK(st.st_mode):
        info.update(_link_target(path))
    return info


def _inherited(path: str) -> os.stat_result | None:
    """The stat of the regular file at `path` whose mode and owner a put without a mode keeps
    (not through a symbolic link, which a put replaces as it is); None in a folder others may
    write (/tmp): anyone could have planted the file there, to own what root writes next."""
    try:
        found = os.lstat(path)
        folder = os.stat(os.path.dirname(path) or "/")
    except OSError:
        return None
    if not stat.S_ISREG(found.st_mode) or folder.st_mode & (stat.S_IWOTH | stat.S_ISVTX):
        return None
    return found


def _optional_int(params: p.JsonDict, name: str) -> int | None:
    return None if params.get(name) is None else param_int(params, name)


class FileStream(Stream):
    kind = "file"

    async def run(self) -> None:
        op = self.params.get("op")
        path = check_path(self.params.get("path"))
        try:
            if op == "put":
                await self._put(path)
            elif op == "get":
                await self._get(path)
            elif op == "mkdir":
                if self.params.get("parents", True):
                    os.makedirs(path, exist_ok=True)
                else:
                    os.mkdir(path)
                self.send_msg("result", info=file_info(path, os.stat(path)))
            elif op == "list":
                self.send_msg("result", entries=self._list(path))
            elif op == "stat":  # `follow: false`: a symbolic link itself (lstat)
                follow = self.params.get("follow", True) is not False
                st = os.stat(path) if follow else os.lstat(path)
                self.send_msg("result", info=file_info(path, st))
            elif op == "remove":
                self._remove(path, bool(self.params.get("recursive", False)))
                self.send_msg("result")
            else:
                raise AgentRequestError("bad_request", f"unknown file op {op!r}")
        except OSError as exc:
            raise AgentRequestError.from_os_error(exc, path) from None

    def _list(self, path: str) -> list[dict[str, Any]]:
        entries, names = [], Names()
        with os.scandir(path) as it:
            for entry in it:
                with contextlib.suppress(FileNotFoundError):
                    st = entry.stat(follow_symlinks=False)
                    entries.append(file_info(entry.path, st, entry.name, names))
        entries.sort(key=lambda e: str(e["name"]))
        return entries

    def _remove(self, path: str, recursive: bool) -> None:
        if path == "/":
            raise AgentRequestError("invalid_path", "refusing to remove /")
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(path)
        elif recursive:
            shutil.rmtree(path)
        else:
            os.rmdir(path)

    async def _get(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise AgentRequestError("is_a_directory", f"{path}: is a directory")
            self.send_msg("stat", info=file_info(path, st))

            async def read(size: int) -> bytes:
                return os.read(fd, size)

            while await self.send_chunk_from(p.STDOUT, read):
                pass
            self.send_msg("result", size=os.fstat(fd).st_size)
        finally:
            os.close(fd)

    async def _put(self, path: str) -> None:
        uid, gid = _optional_int(self.params, "uid"), _optional_int(self.params, "gid")
        parent = os.path.dirname(path)
        if self.params.get("make_parents", True):
            os.makedirs(parent, exist_ok=True)
        if os.path.isdir(path):
            raise AgentRequestError("is_a_directory", f"{path}: is a directory")
        if self.params.get("mode") is not None:
            mode = param_int(self.params, "mode")
        else:  # a file that is there keeps its mode and owner (a script stays runnable)
            mode, kept = 0o644, _inherited(path)
            if kept is not None:
                mode = stat.S_IMODE(kept.st_mode) & 0o777
                uid = kept.st_uid if uid is None else uid
                gid = kept.st_gid if gid is None else gid
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=".sanbox-put-")
        try:
            size = 0
            while (data := await self.inbox.get()) is not None:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                size += len(data)
                self.consumed(len(data))
            os.fchmod(fd, mode)
            if uid is not None or gid is not None:
                os.fchown(fd, -1 if uid is None else uid, -1 if gid is None else gid)
            os.fsync(fd)
            os.close(fd)
            fd = -1
            os.rename(tmp, path)
            tmp = ""
            dir_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            self.send_msg("result", size=size)
        finally:
            if fd >= 0:
                os.close(fd)
            if tmp:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
