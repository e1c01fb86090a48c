"""Which driver this host gets: the one place that knows the drivers by name. QEMU with KVM when
its probe guest boots under KVM and the VM user may open /dev/kvm, else QEMU under TCG; the choice
is cached per host (`qemu/accel.py`). Firecracker is offered only where its probe says it runs
(a binary and a usable KVM); everyone else asks the chosen driver for its capabilities."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from .confine import kvm_usable_by
from .driver import Driver, VmUser
from .qemu.accel import cached_accel, choose_accel
from .qemu.launch import QemuHypervisor

log = logging.getLogger(__name__)

# the isolations in which a guest has a kernel of its own (a real VM, not the local stand-in)
VM_ISOLATIONS = frozenset(QemuHypervisor.isolations) | {"firecracker-kvm"}


@dataclass(frozen=True)
class Choice:
    """A host's driver as `sanbox doctor` and GET /v1/host show it."""

    hypervisor: str
    accel: str
    isolation: str
    reason: str


def choose_driver(host_dir: Path, kernel: Path, initrd: Path, user: VmUser | None) -> Driver:
    """Probe (once per host: cached in `host_dir`) and return this host's driver."""
    choice = choose_accel(host_dir, kernel, initrd)
    accel = choice.accel
    if accel == "kvm" and user is not None and not kvm_usable_by(user):
        log.warning(
            "KVM works, but the VM user %s cannot open /dev/kvm: using TCG; give "
            "/dev/kvm to group kvm (mode 0660)",
            user.name,
        )
        accel = "tcg"
    return QemuHypervisor(accel)


def cached_driver(host_dir: Path) -> Driver:
    """The driver the host's cached probe names (to re-attach before anything booted)."""
    choice = cached_accel(host_dir)
    return QemuHypervisor(choice.accel if choice else "tcg")


def firecracker_status() -> tuple[bool, str]:
    """Whether Firecracker could run here (a binary, its jailer, a usable KVM), or why not. It
    is not chosen yet even where it could run: docs/firecracker.md says what remains."""
    from .firecracker import firecracker_available

    return firecracker_available()


def cached_choice(host_dir: Path) -> Choice | None:
    """What the host's probe chose, without probing; None if it never ran."""
    choice = cached_accel(host_dir)
    if choice is None:
        return None
    driver = QemuHypervisor(choice.accel)
    return Choice(driver.name, choice.accel, driver.isolation, choice.reason)


def probe_choice(host_dir: Path, kernel: Path, initrd: Path) -> Choice:
    """Probe now if needed (cached per host) and say what was chosen and why."""
    choice = choose_accel(host_dir, kernel, initrd)
    driver = QemuHypervisor(choice.accel)
    return Choice(driver.name, choice.accel, driver.isolation, choice.reason)
