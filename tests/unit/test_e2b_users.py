"""The OS user an envd call runs as: a user not found is looked up again next time (never taken
for gone for good), a default user that cannot be made is an error (never root in silence), and
a file that cannot be handed to the call's user is an error (never left root's in silence). The
guest is a fake plane whose exec plays `getent`, `useradd` and `chown`."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import pytest

from sanbox.control.computers import Computers
from sanbox.control.guest import ExecResult
from sanbox.e2b.connect import ConnectError
from sanbox.e2b.envd import Envd, Sandbox
from sanbox.e2b.envd_files import own
from sanbox.e2b.identity import Tokens
from sanbox.store.models import Org

pytestmark = pytest.mark.unit

ORG = cast(Org, SimpleNamespace(id="org_x"))


class Guest:
    """A plane whose one guest has `users` (name -> home); `useradd` works when `can_add`."""

    def __init__(self) -> None:
        self.fleet = SimpleNamespace(bus=SimpleNamespace(taps=[]))
        self.users: dict[str, str] = {}
        self.can_add = False
        self.can_chown = True
        self.ran: list[str] = []

    async def exec(self, _org: Org, _computer: str, cmd: list[str], **_: Any) -> ExecResult:
        self.ran.append(cmd[0])
        if cmd[0] == "getent":
            home = self.users.get(cmd[-1])
            if home is None:
                return ExecResult(2, b"", b"", None, False)
            entry = f"{cmd[-1]}:x:1000:1000::{home}:/bin/bash\n"
            return ExecResult(0, entry.encode(), b"", None, False)
        if cmd[0] == "useradd":
            if not self.can_add:
                return ExecResult(1, b"", b"useradd: cannot lock /etc/passwd", None, False)
            self.users[cmd[-1]] = f"/home/{cmd[-1]}"
            return ExecResult(0, b"", b"", None, False)
        if cmd[0] == "chown":
            if self.can_chown:
                return ExecResult(0, b"", b"", None, False)
            return ExecResult(1, b"", b"chown: invalid user: 'bob:'", None, False)
        raise AssertionError(cmd)


def envd(guest: Guest, create_user: bool = True) -> Envd:
    return Envd(cast(Computers, guest), cast(Tokens, None), create_user)


def test_a_default_user_that_cannot_be_made_is_an_error_and_made_later() -> None:
    guest = Guest()
    e = envd(guest)
    with pytest.raises(ConnectError, match="could not be made.*cannot lock") as refused:
        asyncio.run(e.user(ORG, "cmp_x", None))
    assert refused.value.code == "failed_precondition" and 'user="root"' in refused.value.message
    guest.can_add = True  # the next call tries again
    assert asyncio.run(e.user(ORG, "cmp_x", None)) == ("user", "/home/user")
    guest.ran.clear()
    assert asyncio.run(e.user(ORG, "cmp_x", None)) == ("user", "/home/user")
    assert guest.ran == []  # found: remembered


def test_a_user_made_after_a_lookup_is_found() -> None:
    guest = Guest()
    e = envd(guest)
    with pytest.raises(ConnectError, match="'bob' does not exist"):
        asyncio.run(e.user(ORG, "cmp_x", "bob"))
    guest.users["bob"] = "/home/bob"  # `useradd bob` in the sandbox
    assert asyncio.run(e.user(ORG, "cmp_x", "bob")) == ("bob", "/home/bob")


def test_a_guest_without_the_default_user_not_to_be_made_runs_as_root() -> None:
    guest = Guest()
    e = envd(guest, create_user=False)
    assert asyncio.run(e.user(ORG, "cmp_x", None)) == ("root", "/root")
    assert "useradd" not in guest.ran


def test_a_file_not_handed_to_its_user_is_an_error() -> None:
    guest = Guest()
    sb = Sandbox(cast(Computers, guest), ORG, "cmp_x", "bob", "/home/bob", {})
    asyncio.run(own(sb, "/home/bob/a"))
    guest.can_chown = False
    with pytest.raises(ConnectError, match="root's, not 'bob'.*invalid user") as refused:
        asyncio.run(own(sb, "/home/bob/a"))
    assert refused.value.code == "internal"
