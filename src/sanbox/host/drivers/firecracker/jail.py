"""Confinement by Firecracker's jailer: it makes `<chroot base>/firecracker/<id>/root`, joins the
VM's network namespace and cgroup, pivots into the chroot, drops to the VM user and execs
Firecracker (the same pid: no `--new-pid-ns`). Firecracker then sees only what is in the chroot,
so the kernel, initrd and disk are hard-linked in (a link, not a copy: the disk's writes must land
in the computer's own file) and every path in its configuration is a path inside the chroot.

The argv and the in-chroot paths are pure (unit-tested); `populate` does the linking."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from ._contract import VmSpec, VmUser
from .config import FirecrackerPaths
from .errors import FirecrackerConfigError

_VM_ID = re.compile(r"[A-Za-z0-9-]{1,64}")  # the jailer's rule for --id
NETNS_DIR = Path("/var/run/netns")
CGROUP_ROOT = Path("/sys/fs/cgroup")  # the unified (v2) hierarchy
NO_FILE = 2048  # the jailer's default descriptor limit, stated


@dataclass(frozen=True)
class JailerSettings:
    jailer: Path
    firecracker: Path
    chroot_base: Path  # on the data dir's filesystem: the disk is hard-linked in
    cgroup_root: Path = CGROUP_ROOT


def vm_id(spec: VmSpec) -> str:
    """The jailer's (and Firecracker's) `--id`: `sanbox-<name>`, refused if it breaks their
    rule (letters, digits and hyphens, at most 64). Pure."""
    candidate = f"sanbox-{spec.name}"
    if not _VM_ID.fullmatch(candidate):
        raise FirecrackerConfigError(
            f"{candidate!r} is not a Firecracker VM id (letters, digits, hyphens; at most 64)"
        )
    return candidate


def jail_root(settings: JailerSettings, vmid: str) -> Path:
    """The chroot the jailer makes: `<chroot base>/<exec file name>/<id>/root`. Pure."""
    return settings.chroot_base / settings.firecracker.name / vmid / "root"


def jailed_paths() -> FirecrackerPaths:
    """Every path as Firecracker sees it inside its chroot. Pure."""
    return FirecrackerPaths(
        kernel=Path("/vmlinux"),
        initrd=Path("/initrd"),
        disk=Path("/rootfs.raw"),
        api_socket=Path("/api.sock"),
        vsock=Path("/agent.sock"),
        log=Path("/firecracker.log"),
        metrics=Path("/firecracker.metrics"),
        config=Path("/firecracker.json"),
    )


def on_host(root: Path, inside: Path) -> Path:
    """The host's path of a path inside the chroot at `root`. Pure."""
    return root / inside.relative_to("/")


def parent_cgroup(cgroup_procs: tuple[Path, ...], cgroup_root: Path) -> str | None:
    """The cgroup (relative to the v2 root) the jailer moves Firecracker into: the last one the
    spec joins, as QEMU's launcher ends in the last it writes its pid to. Pure."""
    if not cgroup_procs:
        return None
    group = cgroup_procs[-1].parent
    try:
        return str(group.relative_to(cgroup_root))
    except ValueError as exc:
        raise FirecrackerConfigError(f"{group} is not a cgroup under {cgroup_root}") from exc


def jailer_argv(spec: VmSpec, settings: JailerSettings, user: VmUser) -> list[str]:
    """`jailer --id --exec-file --uid --gid --chroot-base-dir [--netns] [--cgroup-version 2
    --parent-cgroup] --resource-limit -- --config-file --api-sock`: Firecracker's own arguments
    after `--`, its paths inside the chroot. Pure."""
    if user.uid == 0 or user.gid == 0:
        raise FirecrackerConfigError("the jailer must drop to an unprivileged user, not root")
    inside = jailed_paths()
    argv = [
        str(settings.jailer),
        "--id",
        vm_id(spec),
        "--exec-file",
        str(settings.firecracker),
        "--uid",
        str(user.uid),
        "--gid",
        str(user.gid),
        "--chroot-base-dir",
        str(settings.chroot_base),
        "--resource-limit",
        f"no-file={NO_FILE}",
    ]
    if spec.net is not None and spec.net.netns:
        argv += ["--netns", str(NETNS_DIR / spec.net.netns)]
    group = parent_cgroup(spec.cgroup_procs, settings.cgroup_root)
    if group is not None:
        argv += ["--cgroup-version", "2", "--parent-cgroup", group]
    argv += ["--", "--api-sock", str(inside.api_socket)]
    if not spec.restore:
        argv += ["--config-file", str(inside.config)]
    return argv


def populate(spec: VmSpec, root: Path, user: VmUser, config: bytes | None) -> None:
    """Put what Firecracker opens into the chroot: the kernel and initrd (linked, or copied from
    another filesystem: read-only to it), the disk (linked: the same file, so never copied), the
    configuration, and the log and metrics files it writes (owned by the VM user)."""
    inside = jailed_paths()
    root.mkdir(parents=True, exist_ok=True)
    for source, target in ((spec.kernel, inside.kernel), (spec.initrd, inside.initrd)):
        _link(source, on_host(root, target), copy_ok=True)
    _link(spec.disk, on_host(root, inside.disk), copy_ok=False)
    os.chown(on_host(root, inside.disk), user.uid, user.gid)
    for written in (inside.log, inside.metrics):
        path = on_host(root, written)
        path.touch(mode=0o600)
        os.chown(path, user.uid, user.gid)
    if config is not None:
        on_host(root, inside.config).write_bytes(config)


def _link(source: Path, target: Path, copy_ok: bool) -> None:
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError as exc:
        if not copy_ok:
            raise FirecrackerConfigError(
                f"{source} cannot be linked into the jail {target.parent} ({exc.strerror}): "
                "the jailer's chroot base must be on the data dir's filesystem"
            ) from exc
        shutil.copyfile(source, target)
