"""Errors raised by the host runtime.

HostError
├── LayoutError            a path outside the data dir, a malformed computer id
├── HostFullError          no room on this host for it now (a fleet host's own admission)
├── image.ImageError       image builds and lookups
├── disk.DiskError         disk clones, growth, deletion
└── vmm.VmmError           hypervisor processes
"""


class HostError(Exception):
    """Base of the host runtime's errors. `code` is stable; the message says what to do."""

    code = "host_error"


class LayoutError(HostError):
    code = "invalid_path"


class HostFullError(HostError):
    """This host has no room for the RAM or disk asked for, counting what it already promised
    (a fleet host's own admission: the control plane may place it on another host)."""

    code = "host_full"


class MissingToolError(HostError):
    """A program the host needs is not installed."""

    code = "missing_tool"

    def __init__(self, tool: str, package: str) -> None:
        super().__init__(
            f"{tool} is not installed: run `apt-get install {package}` (or `sanbox doctor`)"
        )
        self.tool = tool
        self.package = package
