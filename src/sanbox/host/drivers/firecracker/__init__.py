"""The Firecracker driver: Sanbox's computers as Firecracker microVMs on KVM hosts.

What is here: the VM configuration Firecracker boots from (`config.vm_config`: boot source with
an uncompressed vmlinux, one raw root drive, machine config, tap, vsock, logger, metrics,
entropy) and the guest command line; the jailer's argv and chroot (`jail`); the API calls
(`api`: pause, resume, snapshot create and load with the memory mapped privately, instance
info, actions, balloon) and a client over the API socket; the agent channel over the vsock's
Unix socket (`vsock`: `CONNECT <port>` / `OK <n>`); the driver (`FirecrackerHypervisor`,
`FirecrackerVm`) and the host probe (`firecracker_available`).

How it is tested: unit tests check every configuration section and every API body against
Firecracker's published API spec, the vsock handshake and the API client against real local
Unix sockets, and the probe's reasons with fake programs on PATH. No Firecracker has run here:
these machines have no firecracker binary, so the probe says so and QEMU stays the driver.
docs/firecracker.md says what remains to run it on a KVM host.
"""

from .api import ApiCall, FirecrackerApi
from .config import FirecrackerPaths, kernel_cmdline, vm_config
from .driver import FirecrackerHypervisor, capabilities
from .errors import (
    FirecrackerApiError,
    FirecrackerConfigError,
    FirecrackerError,
    NotSupportedError,
    VsockHandshakeError,
)
from .jail import JailerSettings, jailer_argv
from .probe import firecracker_available
from .vm import FirecrackerVm
from .vsock import open_channel

__all__ = [
    "ApiCall",
    "FirecrackerApi",
    "FirecrackerApiError",
    "FirecrackerConfigError",
    "FirecrackerError",
    "FirecrackerHypervisor",
    "FirecrackerPaths",
    "FirecrackerVm",
    "JailerSettings",
    "NotSupportedError",
    "VsockHandshakeError",
    "capabilities",
    "firecracker_available",
    "jailer_argv",
    "kernel_cmdline",
    "open_channel",
    "vm_config",
]
