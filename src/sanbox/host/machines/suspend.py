"""Pause and resume with memory, given the host's `Machines`: a computer's devices and RAM saved
to its state dir, durably and verifiably (saved/memory.py), and a VM started from them again.

A resume maps the saved RAM privately (`memory-backend-file,share=off`: copy-on-write, clean
pages read from the page cache, written pages the VM's own anonymous memory, charged to its
cgroup) instead of copying it back into a RAM file first. The file leaves the state dir for the
VM's run dir (a rename) and is checked there, in one read pass, while the VM process starts (it
loads nothing of the saved state before the check passed); it is removed when the VM process
ends. Set SANBOX_RESTORE=copy for the former way (a verified copy into a
shared RAM file in the RAM dir), kept for comparison (benchmarks/pause.py).

A pause of a VM that runs from its own mapped memory writes the pages its guest changed into
that file and saves the device state alone (`VmHandle.save_state_in_place`, `memory.
write_in_place`): no pass over the rest of its RAM. Where the driver cannot (or the file is a
shared image's, or gone), it reads the RAM out of the migration stream (`memory.
write_from_stream`; SANBOX_PAUSE=stream always does, for comparison); one of a VM with a
shared RAM file copies the file (`memory.write`).
Either way the state has one form: device stream, sparse memory file, MACed manifest.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Iterator

from ..agent import AgentError
from ..data.layout import ComputerDir
from ..drivers import Driver, VmHandle
from ..errors import HostError
from ..image import Image
from ..saved import mapped_memory, memory
from ..saved.memory import MemoryOutcome, PauseError, SavedState, StateError
from .boot import Machines
from .machine import Machine, MachineSpec

MIB = 1024 * 1024

log = logging.getLogger(__name__)


def compat(spec: MachineSpec, image: Image, driver: Driver) -> dict[str, object]:
    """What a saved state must match to be loaded: the driver and its build, the size, the
    image."""
    return {
        "isolation": driver.isolation,
        "hypervisor_build": driver.build,
        "vcpus": spec.vcpus,
        "memory_mib": spec.memory_mib,
        "image": image.build_id,
    }


@contextlib.contextmanager
def own_memory(m: Machines, machine: Machine) -> Iterator[int | None]:
    """The running VM's own saved memory, if it was resumed from it, open for a save of only
    the pages written since (`save_state_in_place`); None if not, or SANBOX_PAUSE=stream."""
    own = None
    if m.settings.pause == "in-place":
        own = memory.open_mapped(mapped_memory.mapped_file(machine.dir.run))
    try:
        yield own
    finally:
        if own is not None:
            os.close(own)


async def pause(m: Machines, machine: Machine, spec: MachineSpec, image: Image) -> SavedState:
    started = time.monotonic()
    cdir, vm = machine.dir, machine.vm
    tmp = cdir.state / f"{memory.VMSTATE}.tmp"
    with own_memory(m, machine) as own:
        in_place: list[tuple[int, int]] | None = None
        try:
            cdir.state.mkdir(parents=True, exist_ok=True)
            # never a name left of this VM's mapped memory, which a save from the stream cuts
            await asyncio.to_thread(memory.clear_unfinished, cdir.state)
            if own is not None:  # only the pages written since the resume
                in_place = await vm.save_state_in_place(tmp, own)
            ram_in_stream = in_place is None and await vm.save_state(tmp)  # runs again on failure
        except (HostError, OSError) as exc:
            tmp.unlink(missing_ok=True)
            raise PauseError(f"could not save the VM state: {exc}") from exc
        keys = compat(spec, image, await m.choose(image)), started, m.memory_key
        try:
            if in_place is not None:
                assert own is not None
                saved = await asyncio.to_thread(memory.write_in_place, cdir.state, tmp, own, *keys)
            elif ram_in_stream:  # RAM mapped privately (a resumed VM): taken out of the stream
                size = spec.memory_mib * MIB
                saved = await asyncio.to_thread(
                    memory.write_from_stream, cdir.state, tmp, size, *keys, vm.split_saved_state
                )
            else:
                ram = m.data_dir.ram_file(spec.computer_id)
                saved = await asyncio.to_thread(memory.write, cdir.state, tmp, ram, *keys)
        except Exception as exc:  # whatever it was, the VM runs on as it was (or is ended)
            await _run_on(m, vm)
            if isinstance(exc, PauseError):
                raise
            words = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise PauseError(f"could not write the saved state: {words}") from exc
        with contextlib.suppress(AgentError):
            await machine.agent.close()
        try:
            with contextlib.suppress(HostError):  # ended below all the same
                await vm.quit()
            await m.kill_vm(vm)
        except (HostError, OSError) as exc:  # it may run on: its disk would pass the state
            await asyncio.to_thread(memory.discard, cdir.state)
            await _run_on(m, vm)
            raise PauseError(f"the VM did not end once its state was saved: {exc}") from exc
        return saved


async def _run_on(m: Machines, vm: VmHandle) -> None:
    """A VM whose pause did not complete runs again as it was; if its vCPUs cannot be run
    again, it is ended: never left stopped, neither running nor gone."""
    try:
        await vm.continue_running()
    except HostError as exc:
        log.warning("%s could not run on after a failed pause, so ended: %s", vm.run_dir, exc)
        with contextlib.suppress(HostError, OSError):
            await m.kill_vm(vm)


async def resume(m: Machines, spec: MachineSpec, image: Image) -> tuple[Machine, MemoryOutcome]:
    cdir = m.data_dir.computer(spec.computer_id)
    if m.attach_vm(spec.computer_id) is not None:  # (a start's check too): one VM on a disk
        raise HostError(f"computer {spec.computer_id} is already running")
    hv = await m.choose(image)
    wanted = compat(spec, image, hv)
    try:  # usable at all? (missing, corrupt, incompatible); memory checked before the VM runs
        saved = await asyncio.to_thread(memory.load, cdir.state, wanted, m.memory_key)
        machine = await _restore(m, spec, image, cdir, saved)
    except StateError as exc:
        log.warning("%s: saved memory not used: %s", spec.computer_id, exc)
        await asyncio.to_thread(memory.discard, cdir.state)
        return await m.start(spec, image), MemoryOutcome(False, exc.reason)
    except (HostError, AgentError, OSError) as exc:
        await asyncio.to_thread(memory.discard, cdir.state)
        outcome = MemoryOutcome(False, f"restore failed: {exc}")
        return await m.start(spec, image), outcome
    await asyncio.to_thread(memory.discard, cdir.state)  # consumed: the guest moved on
    return machine, MemoryOutcome(True)


async def _restore(
    m: Machines, spec: MachineSpec, image: Image, cdir: ComputerDir, saved: SavedState
) -> Machine:
    checking: asyncio.Future[None] | None = None
    if m.settings.restore == "copy":  # copy saved memory back instead of mapping it
        ram = m.data_dir.ram_file(spec.computer_id)
        await asyncio.to_thread(memory.restore_memory, cdir.state, saved, ram, m.memory_key)
        mapped = None
    else:  # checked while the VM process starts: nothing of the state loads before it passed
        mapped = mapped_memory.mapped_file(cdir.run)
        await asyncio.to_thread(mapped_memory.take_memory, cdir.state, mapped)
        check = asyncio.to_thread(mapped_memory.check_taken, mapped, saved, m.memory_key)
        checking = asyncio.ensure_future(check)
    try:
        # used once: were the host to crash from here on, the disk would be ahead of it
        await asyncio.to_thread(memory.forget, cdir.state)
        return await m.run_saved(spec, image, cdir.state / memory.VMSTATE, mapped, checking)
    finally:
        if checking is not None:
            await asyncio.wait([checking])  # its thread is not left running behind the caller
            if not checking.cancelled():
                checking.exception()  # raised through run_saved, or moot beside what failed first
