"""Saving and loading a QEMU VM's state over QMP. Guest RAM lives in a shared file, so with
`x-ignore-shared` the migration stream carries only the device state (kilobytes); the RAM file is
kept beside it by the caller. A VM resumed from saved memory maps it privately (`share=off`): its
RAM is not skipped, the stream carries it, and `save_state` says so (the caller takes it out,
memstream.py). A load leaves a private RAM block whose pages are not in the stream as it is: the
mapped file. The migration bandwidth limit is raised (the default is 32 MiB/s).

QEMU runs sandboxed (`-sandbox ...,spawn=deny`): it may not start `exec:cat`. The host opens the
state file itself and hands QEMU the descriptor over QMP (`getfd`), then migrates to or from
`fd:NAME`; QEMU never opens a path for it, so the state files stay the host's (root, 0600)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import Any

from ..errors import VmmError, VmNotRunningError
from .qmp import Monitored, QmpClient, QmpError

MAX_BANDWIDTH = 100 * 1024**3  # bytes/s: effectively unlimited
IGNORE_SHARED = [{"capability": "x-ignore-shared", "state": True}]
STATE_FD = "sanbox-vmstate"
RAM_OBJECT = "/objects/ram"  # the memory backend qemu.py's argv names `ram`


async def _migration_done(qmp: QmpClient, timeout: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        info: dict[str, Any] = await qmp.execute("query-migrate") or {}
        status = info.get("status")
        if status == "completed":
            return
        if status in ("failed", "cancelled"):
            raise QmpError(f"saving the VM state failed: {info.get('error-desc', status)}")
        if loop.time() > deadline:
            with contextlib.suppress(QmpError):
                await qmp.execute("migrate_cancel")
            raise QmpError(f"saving the VM state took longer than {timeout:.0f}s")
        await asyncio.sleep(0.005)


async def _ram_shared(qmp: QmpClient) -> bool:
    """Whether the guest's RAM is a shared file (left out of the stream by x-ignore-shared)."""
    try:
        return bool(await qmp.execute("qom-get", path=RAM_OBJECT, property="share"))
    except QmpError:
        return False  # no memory backend object: anonymous RAM, migrated in the stream


async def save_state(vm: Monitored, vmstate: Path, timeout: float = 120.0) -> bool:
    """Stop the vCPUs and write the device state to `vmstate`; True if the stream carries the
    guest's RAM too (its RAM is not a shared file). On failure the VM runs again."""
    qmp = await vm.qmp()
    stopped = False
    try:
        ram_in_stream = not await _ram_shared(qmp)
        await qmp.execute("migrate-set-parameters", **{"max-bandwidth": MAX_BANDWIDTH})
        await qmp.execute("migrate-set-capabilities", capabilities=IGNORE_SHARED)
        fd = os.open(vmstate, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            await qmp.pass_fd(STATE_FD, fd)
        finally:
            os.close(fd)
        await qmp.execute("stop")
        stopped = True
        await qmp.execute("migrate", uri=f"fd:{STATE_FD}")
        await _migration_done(qmp, timeout)
        return ram_in_stream
    except BaseException:
        if stopped:
            with contextlib.suppress(QmpError, OSError):
                await qmp.execute("cont")
        raise
    finally:
        await qmp.close()


async def resume_vcpus(vm: Monitored) -> None:
    """Let a VM whose state was saved (or is half-saved) run on: its vCPUs continue."""
    qmp = await vm.qmp()
    try:
        status = (await qmp.execute("query-status") or {}).get("status")
        if status != "running":
            await qmp.execute("cont")
    finally:
        await qmp.close()


# QEMU run states in which the host stopped the vCPUs (`stop`, a state save) and `cont` runs
# them again; `io-error` (a disk error) and the guest's own shutdown are not among them
HOST_STOPPED = frozenset({"paused", "postmigrate", "finish-migrate"})


async def vcpus_stopped(vm: Monitored) -> bool | None:
    """True if the host stopped the VM's vCPUs (a fork's or snapshot's save the caller never
    finished), False if they run (or stopped for another reason), None if QEMU's monitor could
    not be asked."""
    try:
        qmp = await vm.qmp(timeout=5.0)
    except (VmmError, OSError):
        return None
    try:
        status = (await qmp.execute("query-status", timeout=5.0) or {}).get("status")
    except (QmpError, OSError):
        return None
    finally:
        await qmp.close()
    return status in HOST_STOPPED


async def quit_vm(vm: Monitored) -> None:
    with contextlib.suppress(QmpError, VmNotRunningError):
        qmp = await vm.qmp()
        with contextlib.suppress(QmpError):
            await qmp.execute("quit")
        await qmp.close()
    await vm.kill()


async def load_state(vm: Monitored, vmstate: Path, timeout: float = 60.0) -> None:
    """Load `vmstate` into a VM started with `restore=True` and let it run."""
    qmp = await vm.qmp()
    try:
        await qmp.execute("migrate-set-capabilities", capabilities=IGNORE_SHARED)
        fd = os.open(vmstate, os.O_RDONLY | os.O_CLOEXEC)
        try:
            await qmp.pass_fd(STATE_FD, fd)
        finally:
            os.close(fd)
        await qmp.execute("migrate-incoming", uri=f"fd:{STATE_FD}")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            try:
                status = (await qmp.execute("query-status") or {}).get("status")
            except QmpError as exc:
                raise QmpError("QEMU exited while loading the saved state") from exc
            if status == "running":
                return
            if status in ("paused", "postmigrate", "prelaunch"):
                await qmp.execute("cont")
                return
            if not vm.alive():
                raise QmpError("QEMU exited while loading the saved state")
            if loop.time() > deadline:
                raise QmpError(f"loading the saved state took longer than {timeout:.0f}s")
            await asyncio.sleep(0.005)
    finally:
        await qmp.close()
