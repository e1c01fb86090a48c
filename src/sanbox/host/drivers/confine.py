"""What confines a VM process, whatever its driver: an unprivileged user of its own, and files
that only that user (and root) can reach (a driver adds its own filter: QEMU's seccomp sandbox is
in `qemu/argv.py`). The launcher drops to the user with `setpriv` before the hypervisor starts, so
it never holds root.

- `vm_user()`: the system user `sanbox-vm` (created if missing), with the group that owns
  /dev/kvm when that group may use it. Each computer's QEMU runs as a uid of its own
  (`computer_uid()`: one of 65536 from FIRST_VM_UID, above what useradd hands out as subordinate
  ids and systemd gives containers), in group `sanbox-vm`: one escaped QEMU can neither open
  another computer's disk or RAM file (0600, another uid) nor signal or trace its process. The
  uid is recorded as the owner of the computer's run dir, so it stays the same across boots.
- `open_tap()`: the VM user may not open /dev/net/tun (nor attach to a tap it does not own), so
  the host opens the computer's tap inside its namespace and QEMU inherits the descriptor.
- `prepare()`: the files QEMU opens, owned by that user, mode 0600 (the disk, the RAM file in the
  RAM dir, the console log, the run dir for its sockets and pidfile); the computer's folder is
  root's and closed to other users; the saved state stays root's (QEMU gets it as a descriptor).
  A memory image many VMs map (a snapshot's) is never made a VM's: root's, 0440 to the VMs'
  group, opened read-only (`memory_access`); a RAM file with other names is refused.
- `launcher_script()`: the shell every driver starts its hypervisor from (as root): it joins the
  VM's cgroups, so the hypervisor and all it allocates are in them from the start, and makes the
  VM the OOM killer's choice before the control plane (`oom_score_adj` `OOM_SCORE_ADJ`, kept
  across the drop and exec): a host that runs out of memory ends a guest, not the server or host
  agent that every tenant's computers depend on (nor the database in it).
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import hashlib
import os
import pwd
import shlex
import stat
import struct
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..disk_rate import DiskRate
from ..linux import in_netns
from .driver import Capabilities, VmSpec, VmUser
from .errors import VmStartError

VM_USER = "sanbox-vm"
FIRST_VM_UID = 0x7A000000  # 2046820352: past useradd's subordinate ids and systemd's containers
VM_UIDS = 65536
KVM_DEVICE = Path("/dev/kvm")
OOM_SCORE_ADJ = 500  # a VM's: killed before a process at 0 of the same size (the control plane)
SHARED_MEMORY_MODE = 0o440  # a memory image many VMs map: root's, read by the VMs' group


TUNSETIFF = 0x400454CA
IFF_TAP, IFF_NO_PI, IFF_VNET_HDR = 0x0002, 0x1000, 0x4000


class ConfinementError(VmStartError):
    code = "confinement_failed"


def _open_tap(tap: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
    try:
        flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH22x", tap.encode(), flags))
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_tap(netns: str, tap: str) -> int:
    """A descriptor attached to `tap` inside `netns` (opened by a thread that enters it)."""
    try:
        return in_netns(netns, lambda: _open_tap(tap))
    except Exception as exc:
        raise ConfinementError(f"cannot open {tap} in {netns}: {exc}") from exc


def _useradd(name: str) -> None:
    argv = [
        "useradd",
        "--system",
        "--no-create-home",
        "--home-dir",
        "/nonexistent",
        "--shell",
        "/usr/sbin/nologin",
        name,
    ]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise ConfinementError("cannot create the VM user: useradd is missing (passwd)") from None
    if out.returncode not in (0, 9):  # 9: the name exists (another process made it first)
        raise ConfinementError(f"cannot create the VM user {name}: {out.stderr.strip()}")


def kvm_group(device: Path = KVM_DEVICE) -> int | None:
    """The group that may open /dev/kvm (read and write), if it is not root's."""
    try:
        st = device.stat()
    except OSError:
        return None
    if st.st_gid == 0 or st.st_mode & 0o060 != 0o060:
        return None
    return st.st_gid


def vm_user(name: str = VM_USER) -> VmUser:
    """The VM user, created on demand (`useradd --system`); it gets /dev/kvm's group if any."""
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        _useradd(name)
        pw = pwd.getpwnam(name)
    if pw.pw_uid == 0 or pw.pw_gid == 0:
        raise ConfinementError(f"the VM user {name} has uid or gid 0: it must be unprivileged")
    kvm = kvm_group()
    return VmUser(name, pw.pw_uid, pw.pw_gid, (kvm,) if kvm is not None else ())


@dataclass(frozen=True)
class UidRange:
    """The uids one host's VMs are given: all of the VM range by default; a part of it of its
    own for each host agent sharing a machine (`SANBOX_VM_UIDS`), so two agents' VMs never run as
    one uid (each agent sees only its own data dir's uids)."""

    first: int = FIRST_VM_UID
    count: int = VM_UIDS

    def __post_init__(self) -> None:
        if not (self.count >= 1 and is_vm_uid(self.first) and is_vm_uid(self.last)):
            raise ValueError(
                f"a VM uid range lies within {FIRST_VM_UID}-{FIRST_VM_UID + VM_UIDS - 1}"
            )

    @property
    def last(self) -> int:
        return self.first + self.count - 1

    def __contains__(self, uid: object) -> bool:
        return isinstance(uid, int) and self.first <= uid <= self.last

    @classmethod
    def parse(cls, text: str) -> UidRange:
        """`FIRST-LAST` (inclusive)."""
        first, sep, last = text.partition("-")
        if not sep or not first.strip().isdigit() or not last.strip().isdigit():
            raise ValueError(f"a VM uid range is FIRST-LAST: {text[:40]!r}")
        return cls(int(first), int(last) - int(first) + 1)


def computer_uid(scope: str, taken: set[int], uids: UidRange | None = None) -> int:
    """A uid for one computer (`scope`: data-dir tag and computer id): where its hash falls in
    the range, else the next one no other computer of the data dir holds. Pure."""
    uids = uids or UidRange()
    start = int(hashlib.sha256(scope.encode()).hexdigest()[:8], 16) % uids.count
    for i in range(uids.count):
        uid = uids.first + (start + i) % uids.count
        if uid not in taken:
            return uid
    raise ConfinementError(f"all {uids.count} VM uids of {uids.first}-{uids.last} are taken")


def is_vm_uid(uid: int) -> bool:
    return FIRST_VM_UID <= uid < FIRST_VM_UID + VM_UIDS


def computer_user(base: VmUser, scope: str, run_dir: Path, uids: UidRange | None = None) -> VmUser:
    """The identity of one computer's QEMU: the uid its run dir records (if it is of this host's
    range), or a new one."""
    uids = uids or UidRange()
    try:
        uid = run_dir.stat().st_uid
    except FileNotFoundError:
        uid = 0
    if uid not in uids:
        taken = set()
        for sibling in run_dir.parent.parent.glob("*/run"):
            with contextlib.suppress(OSError):
                taken.add(sibling.stat().st_uid)
        uid = computer_uid(scope, taken, uids)
    return VmUser(f"{base.name}:{uid}", uid, base.gid, base.groups)


def kvm_usable_by(user: VmUser, device: Path = KVM_DEVICE) -> bool:
    try:
        st = device.stat()
    except OSError:
        return False
    if st.st_uid == user.uid:
        return st.st_mode & 0o600 == 0o600
    if st.st_gid in (user.gid, *user.groups):
        return st.st_mode & 0o060 == 0o060
    return st.st_mode & 0o006 == 0o006


def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def launcher_script(cgroup_procs: tuple[Path, ...], redirect: str) -> str:
    """A shell script (run as `sh -c SCRIPT sanbox-launch ARGV...`) that joins the cgroups whose
    `cgroup.procs` files are given, raises its OOM score to `OOM_SCORE_ADJ`, starts ARGV in the
    background with `redirect` (its output's redirections, quoted already), prints its pid and
    exits. Pure."""
    joins = "".join(f"echo $$ > {shlex.quote(str(f))} || exit 1\n" for f in cgroup_procs)
    oom = f"echo {OOM_SCORE_ADJ} > /proc/self/oom_score_adj || exit 1\n"
    return f'cd / || exit 1\n{joins}{oom}"$@" </dev/null {redirect} &\necho $!\n'


def setpriv_argv(user: VmUser) -> list[str]:
    """Drop to `user` for good: no supplementary groups but its own, no capabilities."""
    groups = ",".join(str(g) for g in user.groups)
    return [
        "setpriv",
        f"--reuid={user.uid}",
        f"--regid={user.gid}",
        f"--groups={groups}" if groups else "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
    ]


def _reachable(path: Path, user: VmUser) -> Path | None:
    """The first directory above `path` that `user` may not pass through, if any."""
    for d in reversed(path.parents):
        try:
            st = d.stat()
        except OSError:
            return d
        if st.st_uid == user.uid:
            ok = st.st_mode & stat.S_IXUSR
        elif st.st_gid in (user.gid, *user.groups):
            ok = st.st_mode & stat.S_IXGRP
        else:
            ok = st.st_mode & stat.S_IXOTH
        if not ok:
            return d
    return None


def _own_file(path: Path, user: VmUser, create: bool) -> None:
    """`path` owned by the user, mode 0600; created empty if asked. Never follows a symlink."""
    _set_access(path, create, lambda _links: (user.uid, user.gid, 0o600))


def _set_access(path: Path, create: bool, access: Callable[[int], tuple[int, int, int]]) -> None:
    """`path` given the owner, group and mode `access(its link count)` says (which may refuse).
    Never follows a symlink."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_CREAT if create else 0)
    fd = os.open(path, flags, 0o600)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfinementError(f"{path} is not a regular file")
        uid, gid, mode = access(st.st_nlink)
        os.fchown(fd, uid, gid)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def memory_access(spec: VmSpec, user: VmUser, links: int) -> tuple[int, int, int]:
    """Owner, group and mode of the guest RAM file QEMU opens. A memory image many VMs map (a
    snapshot's: `memory_readonly`) stays root's, readable through the VMs' group (each VM reaches
    only its own link, in its own run dir), writable by none; any other RAM file is the VM's
    own, and one with other names (hard links: a snapshot's or another VM's) is refused, never
    handed to one VM to write, truncate or re-own. Pure."""
    if spec.memory_readonly:
        return 0, user.gid, SHARED_MEMORY_MODE
    if links != 1:
        raise ConfinementError(
            f"{spec.memory_file} has {links} names: a memory image other VMs or a snapshot "
            "share is mapped read-only, never made one VM's"
        )
    return user.uid, user.gid, 0o600


def prepare(spec: VmSpec, user: VmUser) -> None:
    """Make what QEMU opens the user's, and the rest closed to it and to everyone else."""
    computer = spec.run_dir.parent
    for path in (spec.disk, spec.kernel, spec.initrd, spec.run_dir, spec.console_log):
        blocked = _reachable(path, user)
        if blocked is not None and not blocked.is_relative_to(computer):  # those are set below
            raise ConfinementError(
                f"the hypervisor runs as {user.name}, which cannot pass through {blocked}: "
                f"give it search permission (chmod o+x {blocked}) or move the data dir"
            )
    os.chown(computer, 0, 0)
    os.chmod(computer, 0o711)  # its QEMU passes through; nobody lists it (VMs share a group)
    spec.run_dir.mkdir(exist_ok=True)
    os.chown(spec.run_dir, user.uid, user.gid)
    os.chmod(spec.run_dir, 0o700)
    logs = spec.console_log.parent
    logs.mkdir(exist_ok=True)
    os.chown(logs, 0, 0)
    os.chmod(logs, 0o711)
    _own_file(spec.console_log, user, create=True)
    _own_file(spec.disk, user, create=False)
    if spec.memory_file is not None:
        _set_access(
            spec.memory_file, not spec.memory_readonly, lambda n: memory_access(spec, user, n)
        )


def describe(
    caps: Capabilities, user: VmUser | None, cgroups: dict[str, str], rate: DiskRate
) -> dict[str, object]:
    """The confinement in force, for `sanbox doctor` and GET /v1/host: the driver's seccomp
    filter and disk errors, the VM user, the cgroup controllers, and each VM's disk I/O bound
    with how the driver holds it."""
    return {
        "seccomp": caps.seccomp,
        "user": None
        if user is None
        else f"{user.name}: a uid of its own per computer "
        f"({FIRST_VM_UID}-{FIRST_VM_UID + VM_UIDS - 1}), group {group_name(user.gid)}",
        "cgroups": cgroups,
        "disk_errors": caps.disk_errors,
        "disk_io": rate.describe(caps.disk_rate),
    }
