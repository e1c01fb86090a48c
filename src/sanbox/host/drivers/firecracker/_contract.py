"""What this driver takes from the rest of the host layer, in one place: the driver contract
(`Hypervisor`, `VmHandle`, `VmSpec`, ...) and its errors. When the contract moves (`host/vmm/`
to `host/drivers/driver.py`), only these imports change."""

from __future__ import annotations

from ...vmm.errors import VmmError, VmNotRunningError, VmStartError
from ...vmm.hypervisor import Hypervisor, Liveness, NetAttachment, VmHandle, VmSpec, VmUser

__all__ = [
    "Hypervisor",
    "Liveness",
    "NetAttachment",
    "VmHandle",
    "VmNotRunningError",
    "VmSpec",
    "VmStartError",
    "VmUser",
    "VmmError",
]
