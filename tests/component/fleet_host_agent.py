"""Run by the fleet tests as a process of its own: a host agent on the local driver (its "VMs"
are local processes that outlive it, as QEMU's do), served until killed.

    python -m tests.component.fleet_host_agent DATA_DIR PORT [ADDRESS]
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from sanbox.fleet.link.agent import HostAgent
from sanbox.fleet.link.pki import host_identity
from sanbox.fleet.link.serve import serve
from sanbox.host.data.layout import DataDir
from sanbox.host.drivers.local import LocalDriver
from sanbox.host.runtime import HostRuntime


def main() -> None:
    data_dir, port = DataDir(Path(sys.argv[1])), int(sys.argv[2])
    address = sys.argv[3] if len(sys.argv) > 3 else "127.0.0.1"
    runtime = HostRuntime(data_dir, LocalDriver(), networking=False)
    me = host_identity(data_dir.host / "fleet")
    asyncio.run(serve(HostAgent(runtime), address, port, port + 1, me))


if __name__ == "__main__":
    main()
