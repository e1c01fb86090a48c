"""Hypervisor drivers behind one contract (`driver.py`): QEMU (`qemu/`: microvm, KVM or TCG) and
the local-process stand-in (`local/`); `select.py` chooses this host's."""

from .driver import (
    Capabilities,
    Driver,
    Liveness,
    NetAttachment,
    VmHandle,
    VmSpec,
    VmUser,
)
from .errors import (
    MonitorError,
    SavedStateError,
    SwitchUnknownError,
    VmmError,
    VmNotRunningError,
    VmStartError,
)
from .select import (
    VM_ISOLATIONS,
    Choice,
    cached_choice,
    cached_driver,
    choose_driver,
    firecracker_status,
    probe_choice,
)

__all__ = [
    "VM_ISOLATIONS",
    "Capabilities",
    "Choice",
    "Driver",
    "Liveness",
    "MonitorError",
    "NetAttachment",
    "SavedStateError",
    "SwitchUnknownError",
    "VmHandle",
    "VmNotRunningError",
    "VmSpec",
    "VmStartError",
    "VmUser",
    "VmmError",
    "cached_choice",
    "cached_driver",
    "choose_driver",
    "firecracker_status",
    "probe_choice",
]
