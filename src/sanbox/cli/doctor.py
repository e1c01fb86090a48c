"""`sanbox doctor`: what this host gets and what it lacks."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ._output import console

if TYPE_CHECKING:  # the host is imported inside the command: `sanbox` starts fast
    from ..host.disk_rate import DiskRate
    from ..host.drivers import Capabilities

RUNTIME_TOOLS = {  # the host's own; each driver names its tools (`Driver.tools`)
    "ip": "iproute2",
    "nft": "nftables",
}


def doctor(
    data_dir: Annotated[Path | None, typer.Option("--data-dir")] = None,
    probe: Annotated[bool, typer.Option(help="Probe KVM now if not cached.")] = True,
) -> None:
    """Say which hypervisor and acceleration this host gets, whether the data dir can reflink,
    and which tools are missing with how to install them."""
    from ..host.data.layout import DataDir
    from ..host.disk import can_reflink
    from ..host.drivers import cached_choice, cached_driver, probe_choice
    from ..host.image import ImageError, find_image
    from ..host.image._command import missing_tools
    from ..host.settings import HostSettings

    settings = HostSettings.from_env()
    dd = DataDir(data_dir or settings.data_dir, settings.ram_dir)
    ok = True
    console.print(f"data dir      {dd.root}")
    kvm = os.access("/dev/kvm", os.R_OK | os.W_OK)
    console.print(f"/dev/kvm      {'present' if kvm else 'absent'}")
    choice = cached_choice(dd.host)
    driver = cached_driver(dd.host)
    if choice is None and probe:
        try:
            image = find_image(dd, "base")
            choice = probe_choice(dd.host, image.kernel, image.initrd, settings.accel)
        except ImageError as exc:
            console.print(f"hypervisor    {driver.name}, acceleration unknown: {exc}")
    if choice is not None:
        console.print(f"hypervisor    {choice.isolation}  [dim]({choice.reason})[/]")
        if choice.accel == "tcg":
            _tcg_aslr(settings.tcg_aslr)
    _firecracker()
    if choice is not None:
        _snapshots(settings.snapshot, choice.isolation, driver.capabilities)
    _confinement(
        driver.capabilities,
        choice.accel if choice is not None else None,
        dd.root,
        settings.disk_rate,
    )
    _memory(driver.capabilities.hypervisor_memory_mib, settings.vm_overhead_mib, dd.ram_dir)
    try:
        dd.ensure()
        reflink = can_reflink(dd.tmp)
        console.print(
            "disk clones   "
            + ("reflink (instant)" if reflink else "sparse copy (put the data dir on XFS or btrfs)")
        )
    except OSError as exc:
        ok = False
        console.print(f"disk clones   [red]cannot write the data dir: {exc}[/]")
    for tool, package in {**RUNTIME_TOOLS, **driver.tools}.items():
        if shutil.which(tool) is None and shutil.which(tool, path="/usr/sbin:/sbin") is None:
            ok = False
            console.print(f"[red]missing[/]       {tool}: apt-get install {package}")
    for missing in missing_tools():
        ok = False
        console.print(f"[red]missing[/]       {missing.tool}: apt-get install {missing.package}")
    try:
        image = find_image(dd, "base")
        console.print(f"image base    {image.build_id} (kernel {image.kernel_release})")
    except ImageError as exc:
        console.print(f"image base    [yellow]{exc}[/]")
    if not ok:
        raise typer.Exit(1)


def _memory(estimate: int, setting: int | None, ram_dir: Path) -> None:
    """What memory admission counts for each VM beside its guest RAM, and against what."""
    overhead, said = (estimate, "the driver's estimate") if setting is None else (setting, "set")
    console.print(
        f"memory        each VM counted its RAM and {overhead} MiB for its hypervisor ({said}; "
        f"SANBOX_VM_OVERHEAD_MIB), against {ram_dir}"
    )


def _tcg_aslr(kept: bool) -> None:
    """Under emulation: whether guests keep address randomization (SANBOX_TCG_ASLR)."""
    if kept:
        console.print(
            "guest aslr    on  [dim](SANBOX_TCG_ASLR=off: guest programs start up to ~4x "
            "faster under emulation, without address randomization)[/]"
        )
    else:
        console.print(
            "guest aslr    [yellow]off (SANBOX_TCG_ASLR=off): guests boot with norandmaps, "
            "their programs without address randomization[/]"
        )


def _snapshots(setting: str, isolation: str, caps: Capabilities) -> None:
    """How a running computer's memory snapshot is saved (SANBOX_SNAPSHOT), and whether this
    hypervisor can save it as the guest runs."""
    if setting == "stopped":
        can = "can" if caps.live_memory_save else "cannot"
        console.print(
            "snapshots     stopped: the guest is paused while its memory is saved  "
            f"[dim](SANBOX_SNAPSHOT=stopped; {isolation} here {can} save it as the guest runs)[/]"
        )
    elif caps.live_memory_save:
        resumed = "  [dim](one resumed from its saved memory: stopped, the pages it wrote since)[/]"
        aside = "" if setting == "live" else resumed
        console.print(f"snapshots     live: a running guest's memory is saved as it runs{aside}")
    elif setting == "auto":
        console.print(
            "snapshots     stopped: the guest is paused while its memory is saved  "
            f"[dim]({isolation} here could lose pages written during a live save: KVM, or an "
            "emulator that tracks them, saves live)[/]"
        )
    else:
        console.print(
            f"snapshots     [yellow]stopped: SANBOX_SNAPSHOT=live, but {isolation} here could "
            "lose pages the guest writes during a live save (KVM, or an emulator that tracks "
            "them, saves live)[/]"
        )


def _firecracker() -> None:
    """Whether Firecracker could run here (a binary, its jailer, a usable KVM), or why not."""
    from ..host.drivers import firecracker_status

    ok, reason = firecracker_status()
    if ok:
        console.print(f"firecracker   {reason}  [dim](the runtime does not select it yet)[/]")
    else:
        console.print(f"firecracker   unavailable: {reason}")


def _confinement(caps: Capabilities, accel: str | None, data_dir: Path, rate: DiskRate) -> None:
    """What will confine this host's VMs: seccomp, each VM's disk I/O bound (its hypervisor's,
    root or not), the VM user, cgroup controllers (io: what it does for the data dir's disk),
    disk errors."""
    import pwd

    from ..host.drivers import VmUser
    from ..host.drivers.cgroup import Cgroups
    from ..host.drivers.confine import FIRST_VM_UID, VM_UIDS, VM_USER, kvm_group, kvm_usable_by

    if caps.seccomp is None:
        console.print("seccomp       [yellow]none: this driver has no filter[/]")
    else:
        denied = ", ".join(o.split("=")[0] for o in caps.seccomp.split(",")[1:])
        console.print(f"seccomp       on, denied: {denied}")
    bound = rate.describe(caps.disk_rate)
    colour = "yellow" if bound.startswith("unbounded") else "default"
    console.print(f"disk io       [{colour}]{bound}[/]")
    if os.geteuid() != 0:
        console.print(
            "vm user       [yellow]none: the server is not root, so VMs run as its "
            "user, without cgroups[/]"
        )
        return
    try:
        pw = pwd.getpwnam(VM_USER)
        kvm = kvm_group()
        user = VmUser(VM_USER, pw.pw_uid, pw.pw_gid, (kvm,) if kvm is not None else ())
        last = FIRST_VM_UID + VM_UIDS - 1
        console.print(f"vm user       group {VM_USER}, a uid per computer ({FIRST_VM_UID}-{last})")
        if accel == "kvm" and not kvm_usable_by(user):
            console.print(
                f"[yellow]kvm           {VM_USER} cannot open /dev/kvm: VMs fall back to "
                "TCG; give /dev/kvm to group kvm, mode 0660[/]"
            )
    except KeyError:
        console.print(
            f"vm user       {VM_USER} (missing: the server creates it; or run scripts/install)"
        )
    for controller, where in Cgroups.detect().describe(data_dir, rate).items():
        colour = "yellow" if where.startswith("missing") or "no io.max" in where else "default"
        console.print(f"cgroup {controller:<7}[{colour}]{where}[/]")
    console.print(f"disk errors   {caps.disk_errors}")


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
