"""What this driver takes from the rest of the host layer, in one place: the driver contract
(`Driver`, `VmHandle`, `VmSpec`, `Capabilities`, ...) and its errors (`host/drivers/driver.py`,
`errors.py`)."""

from __future__ import annotations

from ..driver import Capabilities, Driver, Liveness, NetAttachment, VmHandle, VmSpec, VmUser
from ..errors import VmmError, VmNotRunningError, VmStartError

__all__ = [
    "Capabilities",
    "Driver",
    "Liveness",
    "NetAttachment",
    "VmHandle",
    "VmNotRunningError",
    "VmSpec",
    "VmStartError",
    "VmUser",
    "VmmError",
]
