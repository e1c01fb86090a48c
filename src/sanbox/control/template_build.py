"""Running a template build: each step in a build computer, each result a snapshot.

A build computer is a VM like any other, booted from what the build starts at (the base image,
the base template's disk, or the snapshot of the last step already built), with the spec's build
allowlist as its egress policy. Steps run in order; after each one the computer's disk is frozen
as a disk-only snapshot (state `layer`: never listed, kept as the build cache under the step's
key), so a later build with the same prefix starts from there. apt, pip and npm packages are
fetched by the host (`templates/fetch`) and installed in the guest offline. The last step writes
the services file the guest's supervisor runs.

Then the template's ready snapshot: a computer is booted from the built disk, its readiness check
waited for, and its running state (memory too) saved; creates restore it. A step that fails ends
the build with the step, its exit status and its last output in the log; the build computer is
destroyed whatever happens (a server restart destroys it as an orphan). Each VM is an org's
computer for its quotas and its usage while it runs (`build_vms.recorded`: refused before it is
made when it would not fit), each step needs room in the org's disk quota for its layer, and
the ready snapshot's record holds the room of its memory image before its computer boots
(`build_layers.py`). On the host each computer and each snapshot is admitted on the data
filesystem as a computer's are (`build_vms.admitted`): no room ends the build, nothing taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from ..host.door import (
    AgentError,
    AgentTimeoutError,
    EgressControl,
    HostError,
    Image,
    Machine,
    MachineSpec,
    MissingToolError,
    Policy,
    PolicyError,
)
from ..store import repo
from ..store.models import BuildStepRow, Org
from ..templates import fetch
from ..templates.context import Context
from ..templates.keys import config
from ..templates.spec import Step
from . import (
    build_bundles,
    build_layers,
    build_packages,
    build_place,
    build_vms,
    readiness,
    snapshots,
)
from .build_log import BuildLog
from .errors import InsufficientStorageError
from .fleet import Fleet
from .quotas import QuotaExceededError

log = logging.getLogger(__name__)

STEP_TIMEOUT = 1800.0
STEP_GRACE = 60.0  # seconds past its timeout a step's end is waited for, then it failed
SERVICES_FILE = "/etc/sanbox/services.json"
HOUSEKEEPING_TIMEOUT = 600.0  # `sync`, removing a bundle: seconds, however loaded the host
DPKG_STATUS = "/var/lib/dpkg/status"  # what an apt step's fetch resolves against


class BuildFailed(Exception):
    """A build that cannot finish: the reason, said in the log and on the template."""


@dataclass(frozen=True)
class Start:
    """What a build computer boots from: the image alone, or a snapshot's disk on it."""

    image: Image
    snapshot_id: str | None


@dataclass
class Built:
    snapshot_id: str  # the built disk (the last step's snapshot)
    ready_snapshot_id: str | None
    ready_reason: str | None  # why there is no ready snapshot, if there is none
    cached_steps: int


class Builder:
    """One build of one template (`template`: its name) for `org`, on the host `host_id` (None:
    this server's own; build_place.py chose it)."""

    def __init__(
        self,
        fleet: Fleet,
        org: Org,
        template: str,
        ctx: Context,
        blog: BuildLog,
        cache: Path,
        host_id: str | None = None,
    ) -> None:
        self.fleet, self.org, self.template, self.ctx = fleet, org, template, ctx
        self.host_id = host_id
        self.host = fleet.host_at(host_id, "the build's host")
        self.spec = ctx.spec
        self.blog = blog
        self.cache = cache  # fetched package bundles
        self.doing = "starting the build"  # the step under way, for a failure's reason
        self.packages: Path | None = None  # where the built disk's package list is kept

    # snapshots of build computers -----------------------------------------------------------

    def _record(self, mspec: MachineSpec, image: Image, memory: bool = False) -> str:
        """A snapshot's record of the build computer (`build_layers.record`); the ready
        snapshot's ends the build here, nothing made, when the org's disk quota has no room."""
        what = self.org.id, self.spec, self.template, mspec, image, self.host_id, memory
        try:
            return build_layers.record(self.fleet.db, *what)
        except QuotaExceededError as exc:
            raise BuildFailed(f"{self.doing}: {exc.message}") from exc

    async def _freeze(
        self, snap_id: str, machine: Machine, mspec: MachineSpec, image: Image, memory: bool
    ) -> str:
        """The snapshot `snap_id` (recorded) of the build computer as it is now: state `layer`;
        its room on the host admitted and held while it is taken (`build_vms.admitted`), or no
        room (`InsufficientStorageError`) and its record removed, nothing taken."""
        with (
            build_layers.until_kept(self.fleet.db, snap_id),
            build_vms.admitted(self.fleet.capacity, self.host, mspec, image, memory),
        ):
            taking = self.host.snapshot(  # nobody waits on a build's guest: the quicker way
                snap_id, mspec.computer_id, machine, mspec, image, memory=memory, live=False
            )
            await snapshots.kept(self.fleet, snap_id, taking, state="layer")
        return snap_id

    def _machine(self, vcpus: int, memory_mib: int, starts_from: str | None) -> MachineSpec:
        """A build computer's spec, its disk at least as large as the snapshot it starts from."""
        start = build_layers.start_disk(self.fleet.db, starts_from)
        return MachineSpec(
            computer_id=repo.new_id("bld-"),
            vcpus=vcpus,
            memory_mib=memory_mib,
            disk_gib=build_layers.disk_gib(self.spec, start),
            hostname=self.template,
        )

    @contextlib.asynccontextmanager
    async def computer(
        self, start: Start, mspec: MachineSpec, allow: tuple[str, ...]
    ) -> AsyncIterator[Machine]:
        """A running build (or readiness) computer, destroyed on the way out."""
        fleet, host = self.fleet, self.host
        with contextlib.ExitStack() as recorded:
            # recorded before it is made: the org's quota holds its room (as a create's record
            # does), its usage is metered, and no watch takes it for a stranger
            where = (self.org.id, self.template, self.host_id, fleet.node)
            vm = build_vms.BuildVm.of(mspec, start.image, *where)
            try:
                recorded.enter_context(build_vms.recorded(fleet.db, vm))
            except QuotaExceededError as exc:
                raise BuildFailed(f"{self.doing}: {exc.message}") from exc
            hold = None
            if self.host_id is None:  # a fleet host admits it itself (its placement reserved it)
                hold = fleet.capacity.admit_here(host, mspec.memory_mib, vm.disk_gib)
            try:
                if start.snapshot_id is None:
                    machine, _disk = await host.create(mspec, start.image)
                else:
                    machine, _ = await host.create_from_snapshot(
                        mspec, start.image, start.snapshot_id
                    )
            except BaseException:
                with contextlib.suppress(Exception):
                    await host.destroy(mspec.computer_id)
                raise
            finally:
                if hold is not None:
                    hold.release()
            egress = self._egress()
            try:
                if egress is not None:
                    try:
                        policy = Policy.of(list(allow))
                    except PolicyError as exc:
                        raise BuildFailed(f"build.allow: {exc}") from exc
                    await egress.start(mspec.computer_id, policy)
                yield machine
            finally:
                if egress is not None:
                    with contextlib.suppress(HostError):  # its host destroys it with the VM
                        await egress.stop(mspec.computer_id)
                await host.destroy(mspec.computer_id)
                await host.gc_layers()  # its last overlay: nothing stands on it

    def _egress(self) -> EgressControl | None:
        """The egress gateway of the build's host (None: this server runs none)."""
        if self.host_id is None:
            return self.fleet.egress
        far = self.fleet.far.of(self.host_id) if self.fleet.far is not None else None
        if far is None:
            raise BuildFailed(
                "the build host's egress gateway does not answer: build again shortly"
            )
        return far

    def _room_for_a_layer(self) -> None:
        """A step's layer counts in the org's disk quota: the build ends here without room."""
        try:
            build_vms.room_for_a_layer(self.fleet.db, self.org.id)
        except QuotaExceededError as exc:
            raise BuildFailed(f"{self.doing}: {exc.message}") from exc

    # steps ----------------------------------------------------------------------------------

    async def _sh(
        self, machine: Machine, argv: list[str], what: str, env: dict[str, str] | None = None
    ) -> None:
        """Run `argv` in the build computer, its output into the log; BuildFailed unless 0."""
        client = await machine.client()
        # a step reads no input: its stdin ends at once, as a Dockerfile RUN's does
        proc = await client.exec_stream(
            argv, env=env, cwd="/root", timeout=STEP_TIMEOUT, stdin=False
        )
        tail: list[str] = []
        events = proc.events(timeout=STEP_TIMEOUT + 30)
        try:  # the step ends on the host's clock, whatever the guest's agent does
            async with asyncio.timeout(STEP_TIMEOUT + STEP_GRACE):
                exit_ = await self.blog.follow(events, tail)
        except TimeoutError:
            raise BuildFailed(f"{what} ran over {STEP_TIMEOUT:.0f}s") from None
        code = getattr(exit_, "exit_code", -1)
        if getattr(exit_, "timed_out", False):
            raise BuildFailed(f"{what} ran over {STEP_TIMEOUT:.0f}s")
        if code != 0:
            last = (": " + " | ".join(tail[-3:])) if tail else ""
            raise BuildFailed(f"{what} failed (exit code {code}){last}")

    async def _install(self, machine: Machine, step: Step) -> None:
        client = await machine.client()
        status = None
        if step.kind == "apt":
            status = self.cache / f"dpkg-status-{machine.computer_id}"
            # bounded: the guest ran the tenant's steps (its status may be a link to /dev/zero)
            try:
                async with asyncio.timeout(HOUSEKEEPING_TIMEOUT):  # a guest may trickle it
                    read = await client.files.read(DPKG_STATUS, most=fetch.MAX_STATUS_BYTES)
            except TimeoutError:
                raise BuildFailed(
                    f"{DPKG_STATUS} took over {HOUSEKEEPING_TIMEOUT:.0f}s to read"
                ) from None
            status.write_bytes(read)
        percent = self.fleet.capacity.disk_low_watermark
        try:
            bundle = await build_bundles.fetched(self.org.id, step, self.cache, percent, status)
        finally:
            if status is not None:
                status.unlink(missing_ok=True)
        mib = bundle.size / 2**20
        self.blog.output(f"[sanbox] fetched {len(bundle.files)} files ({mib:.1f} MiB) on the host")
        await build_bundles.push(client, bundle)
        try:
            await self._sh(machine, list(bundle.install), step.describe())
        finally:  # nothing of the bundle stays in the layer
            await client.exec(
                ["/bin/rm", "-rf", bundle.guest_dir], timeout=HOUSEKEEPING_TIMEOUT, max_output=0
            )

    async def run_step(self, machine: Machine, step: Step | None) -> None:
        """One step (None: the configuration step), then `sync`."""
        client = await machine.client()
        if step is None:
            if self.spec.secrets and self.fleet.book is not None:  # its services trust the CA
                why = await self.fleet.book.install_ca(client, self.org.id)
                if why is not None:
                    raise BuildFailed(f"installing the org's CA failed: {why}")
            body = json.dumps(config(self.spec, self.org.id), indent=2).encode()
            await client.files.put(SERVICES_FILE, body, mode=0o644)
            if self.packages is not None:
                await build_packages.record(client, self.packages, self.blog)
        elif step.kind in ("apt", "pip", "npm"):
            await self._install(machine, step)
        elif step.kind == "copy":
            await client.files.put(step.dest, self.ctx.files[step.src], mode=step.mode)
            self.blog.output(f"[sanbox] copied {step.src} to {step.dest}")
        else:
            env = {"DEBIAN_FRONTEND": "noninteractive", **self.spec.env}
            await self._sh(machine, ["/bin/sh", "-ec", step.command], step.describe(), env)
        # by its path, its output not kept: a step may have put its own `sync` first on the PATH
        await client.exec(["/bin/sync"], timeout=HOUSEKEEPING_TIMEOUT, max_output=0)

    async def build_steps(
        self,
        image: Image,
        start: Start,
        keys: list[str],
        cached: dict[str, str],
        descriptions: list[str],
    ) -> tuple[str, int]:
        """Every step not in the cache; the last step's snapshot and how many were cached."""
        total = len(keys)
        reuse = max((i for i, k in enumerate(keys) if k in cached), default=-1)
        for i in range(reuse + 1):
            self.blog.event(
                "step", index=i + 1, total=total, description=descriptions[i], cached=True
            )
        if reuse == total - 1:
            return cached[keys[-1]], total
        if reuse >= 0:
            start = Start(image, cached[keys[reuse]])
        vcpus = build_vms.build_vcpus(self.fleet.capacity.cpus)
        mspec = self._machine(vcpus, build_vms.build_memory(self.spec), start.snapshot_id)
        steps: list[Step | None] = [*self.spec.steps, None]
        last = ""
        async with self.computer(start, mspec, self.spec.build_allow) as machine:
            for i in range(reuse + 1, total):
                self.blog.event(
                    "step", index=i + 1, total=total, description=descriptions[i], cached=False
                )
                self.doing = f"step {i + 1}/{total} ({descriptions[i]})"
                self._room_for_a_layer()
                t0 = time.monotonic()
                await self.run_step(machine, steps[i])
                last = await self._freeze(self._record(mspec, image), machine, mspec, image, False)
                with self.fleet.db.session() as s:
                    s.merge(
                        BuildStepRow(
                            key=keys[i],
                            org_id=self.org.id,
                            snapshot_id=last,
                            description=descriptions[i],
                        )
                    )
                self.blog.output(
                    f"[sanbox] step {i + 1} done in {time.monotonic() - t0:.1f}s, "
                    f"kept as layer {last}"
                )
        return last, reuse + 1

    # the ready snapshot ---------------------------------------------------------------------

    async def ready_snapshot(self, image: Image, disk_snapshot: str) -> str:
        """Boot a computer of the template, wait for its readiness check, keep it running: its
        record first, holding the room of its memory in the org's disk quota."""
        mspec = self._machine(self.spec.vcpus, self.spec.memory_mib, disk_snapshot)
        self.blog.event(
            "step", index=0, total=0, description="boot it and save it ready", cached=False
        )
        self.doing = "boot it and save it ready"
        snap_id = self._record(mspec, image, memory=True)
        with build_layers.until_kept(self.fleet.db, snap_id):
            async with self.computer(Start(image, disk_snapshot), mspec, self.spec.allow) as vm:
                if self.spec.ready is not None:
                    await readiness.wait(vm, self.spec.ready, self.blog)
                return await self._freeze(snap_id, vm, mspec, image, memory=True)
        raise AssertionError("unreachable")


async def run(
    builder: Builder, image: Image, start: Start, keys: list[str], descriptions: list[str]
) -> Built:
    """The whole build: steps, then the ready snapshot. BuildFailed, or a host error."""
    cached = build_place.cached_on(builder.fleet, builder.org, keys, builder.host_id)
    try:
        disk, reused = await builder.build_steps(image, start, keys, cached, descriptions)
        ready = await builder.ready_snapshot(image, disk)
    except (fetch.FetchError, MissingToolError) as exc:  # (host errors too: caught first)
        raise BuildFailed(f"fetching packages failed: {exc}") from exc
    except HostError as exc:
        raise BuildFailed(f"{builder.doing}: the host failed the build: {exc}") from exc
    except readiness.NotReadyError as exc:
        raise BuildFailed(str(exc)) from exc
    except InsufficientStorageError as exc:  # no room on the host for a VM or a layer
        raise BuildFailed(f"{builder.doing}: {exc.message}") from exc
    except AgentTimeoutError as exc:
        raise BuildFailed(
            f"{builder.doing}: the build computer did not answer in time ({exc}); the host may "
            "be overloaded: build again"
        ) from exc
    except AgentError as exc:
        raise BuildFailed(f"{builder.doing}: the build computer's agent failed: {exc}") from exc
    return Built(disk, ready, None, reused)


def unexpected(builder: Builder, exc: BaseException) -> str:
    """A build's reason for an error nothing above named: the step, and where to look."""
    return (
        f"{builder.doing}: unexpected {type(exc).__name__} in the server (its log has the "
        "details): build again, and report it if it fails the same way"
    )
