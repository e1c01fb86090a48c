"""Hypervisor drivers behind one Protocol. QEMU (microvm; KVM or TCG) today."""

from .accel import AccelChoice, cached_accel, choose_accel
from .errors import QmpError, VmmError, VmNotRunningError, VmStartError
from .hypervisor import Hypervisor, Liveness, NetAttachment, VmHandle, VmSpec, VmUser
from .qemu import QemuHypervisor, QemuVm, qemu_argv
from .qmp import QmpClient

__all__ = [
    "AccelChoice",
    "Hypervisor",
    "Liveness",
    "NetAttachment",
    "QemuHypervisor",
    "QemuVm",
    "QmpClient",
    "QmpError",
    "VmHandle",
    "VmNotRunningError",
    "VmSpec",
    "VmStartError",
    "VmUser",
    "VmmError",
    "cached_accel",
    "choose_accel",
    "qemu_argv",
]
