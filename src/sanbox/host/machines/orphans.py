"""What is left on this host of computers nobody records (a crash between a record and its files,
an interrupted delete): their folders (and VMs), network namespaces, cgroups, and VM processes
whose folder is gone. Parts are passed in; nothing here knows the runtime."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Awaitable, Callable

from ..data.layout import DataDir
from ..drivers.cgroup import Cgroups
from ..drivers.process import stray_processes
from ..errors import HostError
from ..net import Network

log = logging.getLogger(__name__)


async def sweep(
    known: set[str],
    data_dir: DataDir,
    destroy: Callable[[str], Awaitable[None]],
    network: Network | None,
    cgroups: Cgroups,
    is_vm: Callable[[str], bool],
) -> list[str]:
    """Remove what belongs to no computer in `known`; returns what went. One that stays
    (logged) does not stop the others."""
    gone: list[str] = []
    for computer_id in data_dir.computer_ids():
        if computer_id not in known:
            try:
                await destroy(computer_id)
            except HostError as exc:
                log.warning("orphan %s could not be removed: %s", computer_id, exc)
                continue
            gone.append(computer_id)
    for netns in network.namespaces() if network is not None else []:
        computer_id = network.computer_of(netns)  # type: ignore[union-attr]
        if computer_id not in known:
            await network.remove(computer_id)  # type: ignore[union-attr]
            gone.append(netns)
    for name in cgroups.names(f"{data_dir.tag}-"):
        if name.removeprefix(f"{data_dir.tag}-") not in known:
            await asyncio.to_thread(cgroups.remove, name)
            gone.append(f"cgroup {name}")
    for pid in stray_processes(data_dir.computers, known, is_vm):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        gone.append(f"pid {pid}")
    return gone
