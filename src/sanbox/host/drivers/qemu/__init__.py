"""The QEMU driver: every QEMU fact lives here. `argv` (the command line, pure), `launch` (the
detached process, `QemuHypervisor` and `QemuVm`), `qmp` (the monitor client), `state` (device
state save/load over `fd:` migration), `stream` (guest RAM taken out of a migration stream),
`blockops` (live disk switch, stream, resize), `accel` (the KVM probe)."""

from .launch import QemuHypervisor, QemuVm

__all__ = ["QemuHypervisor", "QemuVm"]
