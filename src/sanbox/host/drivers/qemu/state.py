"""Saving and loading a QEMU VM's state over QMP. Guest RAM lives in a shared file, so with
`x-ignore-shared` the migration stream carries only the device state (kilobytes); the RAM file is
kept beside it by the caller. A VM resumed from saved memory maps it privately (`share=off`): its
RAM is not skipped, the stream carries it, and `save_state` says so (the caller takes it out,
memstream.py). A load leaves a private RAM block whose pages are not in the stream as it is: the
mapped file. The migration bandwidth limit is raised (the default is 32 MiB/s).

A live save (`save_state_live`, a running computer's memory snapshot) copies the RAM into the
stream while the vCPUs run (pre-copy, `x-ignore-shared` off so the shared RAM file is sent too),
pass after pass of the pages written since; QEMU stops the vCPUs once what is left fits in
`DOWNTIME_MS`, and `pause-before-switchover` holds it there so the caller switches the disk at
that same instant; then the last pages and the device state follow. The stream's configuration
section says whether it was saved with `x-ignore-shared`: `load_state` sets the same (QEMU
refuses a stream whose capability differs). A guest that writes faster than the copy goes never
converges by itself: after `CONVERGE_AFTER` seconds the downtime limit is lifted, and the save
ends as a stopped one would.

QEMU runs sandboxed (`-sandbox ...,spawn=deny`): it may not start `exec:cat`. The host opens the
state file itself and hands QEMU the descriptor over QMP (`getfd`), then migrates to or from
`fd:NAME`; QEMU never opens a path for it, so the state files stay the host's (root, 0600)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import VmmError, VmNotRunningError
from . import stream
from .qmp import Monitored, QmpClient, QmpError

MAX_BANDWIDTH = 100 * 1024**3  # bytes/s: effectively unlimited
DOWNTIME_MS = 50  # a live save stops the vCPUs once what is left should take this long
CONVERGE_AFTER = 10.0  # s of pre-copy, then the rest goes however long it takes
UNBOUNDED_DOWNTIME_MS = 2_000_000  # QEMU's largest downtime limit
POLL = 0.002  # s between looks at a live save (the stop is known to within this)


def _capabilities(ignore_shared: bool, pause_before_switchover: bool) -> list[dict[str, Any]]:
    """Every capability a save or load here sets: all of them each time, since QEMU keeps
    what the last migration set."""
    return [
        {"capability": "x-ignore-shared", "state": ignore_shared},
        {"capability": "pause-before-switchover", "state": pause_before_switchover},
    ]


IGNORE_SHARED = _capabilities(True, False)
LIVE = _capabilities(False, True)
STATE_FD = "sanbox-vmstate"
# QEMU run states in which the host stopped the vCPUs (`stop`, a state save) and `cont` runs
# them again; `io-error` (a disk error) and the guest's own shutdown are not among them
HOST_STOPPED = frozenset({"paused", "postmigrate", "finish-migrate"})
# a migration that still holds the VM (a live save whose caller is gone, or one under way)
MIGRATING = frozenset({"setup", "active", "pre-switchover", "device", "cancelling"})
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


async def _stream_to(qmp: QmpClient, vmstate: Path) -> None:
    """Hand QEMU `vmstate`, opened (created, 0600) by the host, as `fd:STATE_FD`."""
    fd = os.open(vmstate, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        await qmp.pass_fd(STATE_FD, fd)
    finally:
        os.close(fd)


@dataclass
class Saving:
    """A save's hold on the VM's monitor (`saving`): `stop` stops the vCPUs."""

    qmp: QmpClient
    stopped: bool = False

    async def stop(self) -> None:
        await self.qmp.execute("stop")
        self.stopped = True


@contextlib.asynccontextmanager
async def saving(vm: Monitored) -> AsyncIterator[Saving]:
    """The VM's monitor for a stopped save; if the block fails after `stop`, the vCPUs run
    again."""
    qmp = await vm.qmp()
    save = Saving(qmp)
    try:
        yield save
    except BaseException:
        if save.stopped:
            with contextlib.suppress(QmpError, OSError):
                await qmp.execute("cont")
        raise
    finally:
        await qmp.close()


async def save_state(vm: Monitored, vmstate: Path, timeout: float = 120.0) -> bool:
    """Stop the vCPUs and write the device state to `vmstate`; True if the stream carries the
    guest's RAM too (its RAM is not a shared file). On failure the VM runs again."""
    async with saving(vm) as save:
        qmp = save.qmp
        ram_in_stream = not await _ram_shared(qmp)
        await qmp.execute("migrate-set-parameters", **{"max-bandwidth": MAX_BANDWIDTH})
        await qmp.execute("migrate-set-capabilities", capabilities=IGNORE_SHARED)
        await _stream_to(qmp, vmstate)
        await save.stop()
        await qmp.execute("migrate", uri=f"fd:{STATE_FD}")
        await _migration_done(qmp, timeout)
        return ram_in_stream


async def save_state_live(
    vm: Monitored, vmstate: Path, at_stop: Callable[[], Awaitable[None]], timeout: float = 300.0
) -> float:
    """Write the guest's RAM and device state to `vmstate` while the vCPUs run; they stop for
    the last pages, `at_stop` runs at that instant (the monitor free for it: QEMU serves one
    client at a time), and they stay stopped (`resume_vcpus` runs them). Returns when they
    stopped (`time.monotonic`, an early bound: the stop is known to within a look). On failure
    the migration is cancelled and the VM runs again."""
    qmp = await vm.qmp()
    connected = True
    try:
        limits = {"max-bandwidth": MAX_BANDWIDTH, "downtime-limit": DOWNTIME_MS}
        await qmp.execute("migrate-set-parameters", **limits)
        await qmp.execute("migrate-set-capabilities", capabilities=LIVE)
        await _stream_to(qmp, vmstate)
        await qmp.execute("migrate", uri=f"fd:{STATE_FD}")
        started = time.monotonic()
        seen_stopped: float | None = None
        converging = False
        while True:
            info: dict[str, Any] = await qmp.execute("query-migrate") or {}
            status = info.get("status")
            now = time.monotonic()
            if status == "pre-switchover" and seen_stopped is None:  # once: it may still say so
                seen_stopped = now - POLL
                await qmp.close()
                connected = False
                await at_stop()
                qmp, connected = await vm.qmp(), True
                await qmp.execute("migrate-continue", state="pre-switchover")
            elif status == "completed":
                by_qemu = now - float(info.get("downtime", 0)) / 1000 - POLL
                return by_qemu if seen_stopped is None else min(seen_stopped, by_qemu)
            elif status in ("failed", "cancelled"):
                raise QmpError(f"saving the VM state failed: {info.get('error-desc', status)}")
            elif now - started > timeout:
                raise QmpError(f"saving the VM state took longer than {timeout:.0f}s")
            elif not converging and now - started > CONVERGE_AFTER:
                converging = True  # the guest writes faster than the copy goes: the rest stopped
                unbounded = {"downtime-limit": UNBOUNDED_DOWNTIME_MS}
                await qmp.execute("migrate-set-parameters", **unbounded)
            await asyncio.sleep(POLL)
    except BaseException:
        with contextlib.suppress(QmpError, VmmError, OSError):
            if not connected:
                qmp, connected = await vm.qmp(), True
            await _cancel_migration(qmp)
            await _run_again(qmp)
        raise
    finally:
        if connected:
            await qmp.close()


async def _cancel_migration(qmp: QmpClient, timeout: float = 30.0) -> None:
    """Cancel a migration that still holds the VM and wait until QEMU has let it go."""
    deadline = time.monotonic() + timeout
    cancelled = False
    while True:
        status = (await qmp.execute("query-migrate") or {}).get("status")
        if status not in MIGRATING:
            return
        if not cancelled:
            await qmp.execute("migrate_cancel")
            cancelled = True
        if time.monotonic() > deadline:
            raise QmpError(f"a migration would not end: still {status}")
        await asyncio.sleep(POLL)


async def _run_again(qmp: QmpClient) -> None:
    status = (await qmp.execute("query-status") or {}).get("status")
    if status in HOST_STOPPED:
        await qmp.execute("cont")


async def resume_vcpus(vm: Monitored) -> None:
    """Let a VM whose state was saved (or is half-saved) run on: its vCPUs continue. A live
    save still under way (its caller gone) is cancelled first."""
    qmp = await vm.qmp()
    try:
        await _cancel_migration(qmp)
        status = (await qmp.execute("query-status") or {}).get("status")
        if status != "running":
            await qmp.execute("cont")
    finally:
        await qmp.close()


async def vcpus_stopped(vm: Monitored) -> bool | None:
    """True if the host stopped the VM's vCPUs or a save still holds it (a fork's or
    snapshot's save the caller never finished: a live one stops the vCPUs when it ends), False
    if they run (or stopped for another reason), None if QEMU's monitor could not be asked."""
    try:
        qmp = await vm.qmp(timeout=5.0)
    except (VmmError, OSError):
        return None
    try:
        status = (await qmp.execute("query-status", timeout=5.0) or {}).get("status")
        migration = (await qmp.execute("query-migrate", timeout=5.0) or {}).get("status")
    except (QmpError, OSError):
        return None
    finally:
        await qmp.close()
    return status in HOST_STOPPED or migration in MIGRATING


async def quit_vm(vm: Monitored) -> None:
    with contextlib.suppress(QmpError, VmNotRunningError):
        qmp = await vm.qmp()
        with contextlib.suppress(QmpError):
            await qmp.execute("quit")
        await qmp.close()
    await vm.kill()


async def load_state(vm: Monitored, vmstate: Path, timeout: float = 60.0) -> None:
    """Load `vmstate` into a VM started with `restore=True` and let it run."""
    ignore_shared = await asyncio.to_thread(stream.ignores_shared, vmstate)
    qmp = await vm.qmp()
    try:
        await qmp.execute(
            "migrate-set-capabilities", capabilities=_capabilities(ignore_shared, False)
        )
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
