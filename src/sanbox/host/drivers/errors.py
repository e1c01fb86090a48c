"""Errors of hypervisor drivers.

HostError
└── VmmError
    ├── VmStartError         the hypervisor process did not start (with its own words)
    ├── VmNotRunningError    the VM process is gone
    ├── MonitorError         the hypervisor's control interface refused a command or did not
    │   │                    answer (QEMU's QMP: QmpError)
    │   └── SwitchUnknownError  a disk switch neither answered nor known: the guest may write
    │                        to the old disk or the new overlay
    └── SavedStateError      a saved state the driver cannot read
"""

from __future__ import annotations

from ..errors import HostError


class VmmError(HostError):
    code = "hypervisor_error"


class VmStartError(VmmError):
    code = "vm_start_failed"


class VmNotRunningError(VmmError):
    code = "computer_not_running"


class MonitorError(VmmError):
    code = "monitor_error"


class SwitchUnknownError(MonitorError):
    code = "disk_switch_unknown"


class SavedStateError(VmmError):
    code = "saved_state_error"
