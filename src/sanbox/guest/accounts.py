"""Who a command runs as: an account looked up by name or uid (with its groups), kept while the
account files stay as they were, and the environment a command of it starts with."""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass

from .errors import AgentRequestError

BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Identity:
    uid: int
    gid: int
    name: str
    home: str
    shell: str
    groups: tuple[int, ...]


ACCOUNTS = ("/etc/passwd", "/etc/group")
_known: dict[object, Identity] = {}  # user -> identity, while the account files stay as read
_known_files: list[tuple[int, int, int]] = []
KNOWN_MAX = 64


def resolve_user(user: object) -> Identity:
    """The account ``user`` names (None: the agent's own), with its groups. Looked up again only
    when /etc/passwd or /etc/group changed: each lookup reads both files (about 1 ms under TCG)."""
    try:
        files = [(st.st_ino, st.st_size, st.st_mtime_ns) for st in map(os.stat, ACCOUNTS)]
    except OSError:
        files = []
    if files != _known_files or len(_known) >= KNOWN_MAX:
        _known.clear()
        _known_files[:] = files
    if not (user is None or isinstance(user, int | str)):
        return _look_up(user)  # refused there
    key = (type(user), user)
    if (ident := _known.get(key)) is None:
        ident = _known[key] = _look_up(user)
    return ident


def _look_up(user: object) -> Identity:
    try:
        if user is None:
            entry = pwd.getpwuid(os.getuid())
        elif isinstance(user, int) and not isinstance(user, bool):
            entry = pwd.getpwuid(user)
        elif isinstance(user, str):
            entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
        else:
            raise AgentRequestError("bad_request", "user must be a name or a uid")
    except KeyError:
        raise AgentRequestError("unknown_user", f"no such user: {user}") from None
    groups = os.getgrouplist(entry.pw_name, entry.pw_gid)
    return Identity(
        entry.pw_uid, entry.pw_gid, entry.pw_name, entry.pw_dir, entry.pw_shell, tuple(groups)
    )


def build_env(ident: Identity, extra: object, term: str) -> dict[str, str]:
    env = {
        "PATH": BASE_PATH,
        "HOME": ident.home,
        "USER": ident.name,
        "LOGNAME": ident.name,
        "SHELL": ident.shell or "/bin/sh",
        "LANG": "C.UTF-8",
        "TERM": term,
    }
    if extra is not None:
        if not isinstance(extra, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in extra.items()
        ):
            raise AgentRequestError("bad_request", "env must map strings to strings")
        env.update(extra)
    return env
