"""What an envd call acts on: the computer its sandbox id names (its access token checked), its
org, and the OS user the call runs as.

The user is the one the SDK names (`Authorization: Basic base64("<user>:")`, or `username=` on
/files), else E2B's default user `user` (home `/home/user`). A guest without `user` gets one made
on first use, through an exec as root (`useradd -m -s /bin/bash user`), unless the server says not
to (`e2b_create_user`; the component tier's stand-in guest is this host): then calls run as root.
`root` is always there. Other users must exist in the guest."""

from __future__ import annotations

import asyncio
import base64
import binascii
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass

from ..control.computers import Computers
from ..control.errors import ControlError
from ..control.guest import ExecResult
from ..control.states import State
from ..store.models import ComputerRow, EventRow, Org
from . import identity
from .connect import ConnectError
from .errors import safe_message
from .identity import Tokens
from .processes import ProcessTable

DEFAULT_USER = "user"
_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
_USER_CACHE = 10_000  # (computer, user) homes remembered
_ROOTLESS = 10.0  # seconds a guest without the default user (not to be made) is not asked again
_LIVE = {State.RUNNING, State.SUSPENDED}
_HOLDING = {State.RUNNING, State.SUSPENDED, State.PAUSING, State.PAUSED, State.RESUMING}
_RESUMED = {"computer.resumed", "computer.woken", "computer.reattached"}
_STOPPED = {"computer.stopped", "computer.deleted", "computer.error", "computer.vm_exited"}
_PAUSING = "computer.pausing"  # from here to a resume or a failed pause, the guest's clock stops
_PAUSE_FAILED = "computer.pause_failed"  # running as it was


class SandboxGoneError(Exception):
    """No running sandbox by that id: envd answers 502, which the SDK reads as not running."""


@dataclass(frozen=True)
class Sandbox:
    plane: Computers
    org: Org
    computer_id: str
    user: str
    home: str
    env: dict[str, str]  # the computer's own (from its create), under each call's

    def path(self, path: str) -> str:
        """A path the SDK sent, made absolute as envd's `ExpandAndResolve` makes it: `~` and
        `~/…` are in the call's user's home (`~name` is refused, as envd refuses it), a relative
        path is under that home, nothing is the home. `.` and `..` are then resolved by name
        (envd leaves them in an absolute path for the kernel, which resolves `..` after a
        symbolic link from the link's target: the one difference). The guest agent checks the
        result as it checks any path (absolute, no `..`); what it refuses (removing `/`) it
        refuses however the path was spelt."""
        if path.startswith("~"):
            if len(path) > 1 and path[1] != "/":
                raise ConnectError(
                    "invalid_argument", f"cannot expand user-specific home dir in {path[:80]!r}"
                )
            path = self.home + path[1:]
        resolved = posixpath.normpath(posixpath.join(self.home, path))
        return "/" + resolved.lstrip("/")  # POSIX keeps a leading "//": envd does not


def basic_user(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise ConnectError("invalid_argument", "the Authorization header is not Basic") from None
    return decoded.partition(":")[0] or None


class Envd:
    """The envd side of every sandbox: tokens, users, running processes."""

    def __init__(
        self,
        plane: Computers,
        tokens: Tokens,
        create_user: bool,
        take: Callable[[str], None] = lambda _org: None,
    ) -> None:
        self.plane = plane
        self.tokens = tokens
        self.create_user = create_user
        self.take = take  # one request of an org's rate (`Keys.take_org`), or RateLimitedError
        self.processes = ProcessTable(plane, self._standing)
        self._homes: dict[tuple[str, str], str] = {}  # (computer, user) -> home, users found
        self._rootless: dict[str, float] = {}  # computer -> until when it runs as root
        plane.fleet.bus.taps.append(self._event)

    def _standing(self, computer: str) -> str:
        """Whether the computer runs, holds its processes without running them (paused with its
        memory, or on its way there or back), or lost them ("running", "held", "gone")."""
        row = self.plane.fleet.by_id(computer)
        if row is None or State(row.state) not in _HOLDING:
            return "gone"
        return "running" if row.state == State.RUNNING else "held"

    def _event(self, ev: EventRow) -> None:
        """Processes detached by a pause are re-attached on resume, ended with their computer;
        their deadlines held from a pause's start to the resume.
        A tap must not raise (it would fail the event's publisher) nor run off the loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # published from a worker thread: the next envd call re-syncs instead
        if ev.computer_id is None:
            return
        if ev.type in _STOPPED:
            self.processes.stopped(ev.computer_id)
        elif ev.type == _PAUSING:
            self.processes.held(ev.computer_id)
        elif ev.type == _PAUSE_FAILED:
            self.processes.released(ev.computer_id)
        elif ev.type in _RESUMED:
            self.processes.released(ev.computer_id)
            self.processes.resync(ev.computer_id)

    def computer(self, sandbox_id: str, token: str | None) -> tuple[ComputerRow, Org]:
        """The running computer and its org, if the token is its own (SandboxGoneError if it is
        not there or at rest; an unauthenticated ConnectError for a wrong token), each call
        counted against its org's request rate (RateLimitedError past it)."""
        computer = identity.computer_id(sandbox_id)
        if computer is None:
            raise SandboxGoneError(sandbox_id)
        if not self.tokens.envd_matches(computer, token or ""):
            raise ConnectError("unauthenticated", "the access token is not this sandbox's")
        row, org = self.running(computer)
        self.take(org.id)
        return row, org

    def running(self, computer: str) -> tuple[ComputerRow, Org]:
        row = self.plane.fleet.by_id(computer)
        if row is None or State(row.state) not in _LIVE:
            raise SandboxGoneError(computer)
        with self.plane.fleet.db.session() as s:
            org = s.get(Org, row.org_id)
        if org is None:
            raise SandboxGoneError(computer)
        return row, org

    async def sandbox(self, row: ComputerRow, org: Org, user: str | None) -> Sandbox:
        """What a call on the computer (`computer()`'s) acts on, as the user it names."""
        name, home = await self.user(org, row.id, user)
        return Sandbox(self.plane, org, row.id, name, home, dict(row.env or {}))

    async def user(self, org: Org, computer: str, requested: str | None) -> tuple[str, str]:
        """The OS user a call runs as and its home. A user found is remembered; one not found is
        looked up again next time (made since: `useradd bob`), but for a guest without the
        default user that is not to be made, whose calls run as root for `_ROOTLESS` seconds
        before it is looked up again. A default user that cannot be made is an error, never
        root."""
        if requested == "root":
            return "root", "/root"
        name = requested or DEFAULT_USER
        if _USER.fullmatch(name) is None:
            raise ConnectError("invalid_argument", f"invalid user name {name[:40]!r}")
        loop = asyncio.get_running_loop()
        home = self._homes.get((computer, name))
        if home is None and requested is None and self._rootless.get(computer, 0.0) > loop.time():
            return "root", "/root"
        if home is None:
            home = await self._home(org, computer, name)
            if home is None and name == DEFAULT_USER and self.create_user:
                home = await self._make_user(org, computer, name)
            if home is not None:
                if len(self._homes) >= _USER_CACHE:
                    self._homes.clear()
                self._homes[(computer, name)] = home
        if home is not None:
            return name, home
        if requested is None:  # no default user in this guest: E2B's envd runs as root then
            if len(self._rootless) >= _USER_CACHE:
                self._rootless.clear()
            self._rootless[computer] = loop.time() + _ROOTLESS
            return "root", "/root"
        raise ConnectError("invalid_argument", f"user {name!r} does not exist in the sandbox")

    async def _home(self, org: Org, computer: str, name: str) -> str | None:
        result = await self._exec_root(org, computer, ["getent", "passwd", name])
        fields = result.stdout.decode(errors="replace").strip().split(":")
        if result.exit_code != 0 or len(fields) < 7:
            return None
        return fields[5] or "/"

    async def _make_user(self, org: Org, computer: str, name: str) -> str:
        """`name` made in the guest (`useradd`), its home; what to do if that fails. Another
        call may have made it meanwhile: the user is looked up again, whatever useradd said."""
        made = await self._exec_root(org, computer, ["useradd", "-m", "-s", "/bin/bash", name])
        home = await self._home(org, computer, name)
        if home is None:
            why = made.stderr.decode(errors="replace").strip()[:300] or f"exit {made.exit_code}"
            raise ConnectError(
                "failed_precondition",
                f"the sandbox has no user {name!r} and it could not be made (useradd: {why}): "
                f'make it in the template, or name another user (user="root")',
            )
        return home

    async def _exec_root(self, org: Org, computer: str, cmd: list[str]) -> ExecResult:
        try:
            return await self.plane.exec(
                org, computer, cmd, user=0, timeout=30, max_output=64 * 1024
            )
        except ControlError as exc:
            why = safe_message(exc, "envd")
            raise ConnectError("unavailable", f"the sandbox did not answer: {why}") from exc
