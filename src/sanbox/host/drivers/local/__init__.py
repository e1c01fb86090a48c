"""The local driver: the real guest agent as a local process in place of a VM. A test double for
the hypervisor only (disks, run dirs, sockets, the agent protocol and the store stay real), kept
for the component tier, and a driver of the same contract as QEMU's so the two cannot drift. It
isolates nothing: never a product's choice (`select.py` never picks it)."""

from .launch import LocalDriver, LocalVm

__all__ = ["LocalDriver", "LocalVm"]
