"""Errors of hypervisor drivers.

HostError
└── VmmError
    ├── VmStartError         the hypervisor process did not start (with its own words)
    ├── VmNotRunningError    the VM process is gone
    └── QmpError             the QEMU monitor refused a command or did not answer
"""

from __future__ import annotations

from ..errors import HostError


class VmmError(HostError):
    code = "hypervisor_error"


class VmStartError(VmmError):
    code = "vm_start_failed"


class VmNotRunningError(VmmError):
    code = "computer_not_running"


class QmpError(VmmError):
    code = "qmp_error"
