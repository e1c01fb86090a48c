"""Errors of the Firecracker driver. Codes are the host layer's (control/host_errors.py maps them)
except `not_supported`, which has no line there yet.

VmmError (the driver contract's)
└── FirecrackerError
    ├── FirecrackerConfigError    a VmSpec Firecracker cannot run (a qcow2 disk, 40 vCPUs, ...)
    ├── FirecrackerApiError       the API socket refused a request (with its fault_message)
    ├── VsockHandshakeError       the vsock's `CONNECT <port>` was not answered `OK <n>`
    └── NotSupportedError         a verb Firecracker has no way to do (a live disk switch)
"""

from __future__ import annotations

from ._contract import VmmError


class FirecrackerError(VmmError):
    code = "hypervisor_error"


class FirecrackerConfigError(FirecrackerError):
    code = "vm_start_failed"


class FirecrackerApiError(FirecrackerError):
    pass


class VsockHandshakeError(FirecrackerError):
    pass


class NotSupportedError(FirecrackerError):
    code = "not_supported"
