"""`sanbox doctor`: what this host gets and what it lacks."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Annotated

import typer

from ..host.disk import can_reflink
from ..host.image import ImageError, find_image
from ..host.image._command import missing_tools
from ..host.layout import DataDir, default_data_dir
from ..host.vmm import cached_accel, choose_accel
from ._output import console

RUNTIME_TOOLS = {
    "qemu-system-x86_64": "qemu-system-x86",
    "ip": "iproute2",
    "nft": "nftables",
}


def doctor(
    data_dir: Annotated[Path | None, typer.Option("--data-dir")] = None,
    probe: Annotated[bool, typer.Option(help="Probe KVM now if not cached.")] = True,
) -> None:
    """Say which hypervisor and acceleration this host gets, whether the data dir can reflink,
    and which tools are missing with how to install them."""
    dd = DataDir(data_dir or default_data_dir())
    ok = True
    console.print(f"data dir      {dd.root}")
    kvm = os.access("/dev/kvm", os.R_OK | os.W_OK)
    console.print(f"/dev/kvm      {'present' if kvm else 'absent'}")
    accel = cached_accel(dd.host)
    if accel is None and probe:
        try:
            image = find_image(dd, "base")
            accel = choose_accel(dd.host, image.kernel, image.initrd)
        except ImageError as exc:
            console.print(f"hypervisor    qemu, acceleration unknown: {exc}")
    if accel is not None:
        console.print(f"hypervisor    qemu-{accel.accel}  [dim]({accel.reason})[/]")
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
    for tool, package in RUNTIME_TOOLS.items():
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
