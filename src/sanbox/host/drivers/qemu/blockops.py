"""Disk snapshots of a running QEMU VM over QMP.

`switch_disk` moves the guest's writes to a new qcow2 overlay at one instant: the host has made
the overlay (its header names the current disk file, by a path that reaches the same file, as
backing), `blockdev-add` opens it with no backing, and `blockdev-snapshot` puts it on top of the
current disk node (drained and flushed first), which becomes its read-only backing. QEMU writes no
header here, so the overlay keeps the backing path the host gave it. The current disk file must
stay where QEMU opened it: when QEMU reactivates its images (a `cont` after the device state was
saved) it may reopen a node by the name it opened it by.

`stream_disk` bounds a live chain: a `block-stream` job copies what the layers between the
overlay and a base hold into the overlay, then drops them; QEMU rewrites the overlay's backing
name to the base node's file name, so the base must be a file that was never renamed (the image).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from pathlib import Path
from typing import Any

from ..errors import SwitchUnknownError
from .qmp import Monitored, QmpError, QmpNoAnswer

DRIVE = "root"  # the -drive id qemu.py's argv gives the root disk
STREAM_TIMEOUT = 600.0


async def pause(vm: Monitored) -> None:
    """Stop the vCPUs (devices and the monitor keep working)."""
    qmp = await vm.qmp()
    try:
        await qmp.execute("stop")
    finally:
        await qmp.close()


async def switch_disk(vm: Monitored, overlay: Path) -> None:
    """Continue the guest's disk on `overlay`, whose backing file is the disk it has now."""
    qmp = await vm.qmp()
    node = f"sanbox-{secrets.token_hex(4)}"
    try:
        await qmp.execute(
            "blockdev-add",
            30.0,
            **{
                "driver": "qcow2",
                "node-name": node,
                "discard": "unmap",
                "backing": None,
                "file": {"driver": "file", "filename": str(overlay), "discard": "unmap"},
            },
        )
        try:
            await qmp.execute("blockdev-snapshot", 60.0, node=DRIVE, overlay=node)
            return
        except QmpNoAnswer as exc:  # a drain on a slow disk: it may have switched after all
            unanswered = exc
        except QmpError:
            with contextlib.suppress(QmpError):
                await qmp.execute("blockdev-del", 30.0, **{"node-name": node})
            raise
    finally:
        await qmp.close()  # QEMU serves one monitor client at a time: asked again below
    await _settle(vm, overlay, node, unanswered)


async def _settle(vm: Monitored, overlay: Path, node: str, unanswered: QmpNoAnswer) -> None:
    """After a switch QEMU did not answer, ask it on a new monitor connection whether the
    guest's disk writes to the overlay now: done if so; if not, the overlay's node goes and the
    switch failed (`unanswered`); `SwitchUnknownError` if QEMU cannot say (the caller must not
    take the overlay away: the guest may be writing to it)."""
    try:
        qmp = await vm.qmp()
    except QmpError as exc:
        raise SwitchUnknownError(f"{unanswered}; and then {exc}") from exc
    try:
        try:
            devices = await qmp.execute("query-block", 30.0) or []
        except QmpError as exc:
            raise SwitchUnknownError(f"{unanswered}; and then {exc}") from exc
        drive = next((d for d in devices if d.get("device") == DRIVE), None)
        if drive is None:
            raise SwitchUnknownError(f"{unanswered}; and then QEMU listed no drive {DRIVE!r}")
        top = drive.get("inserted") or {}
        if top.get("node-name") == node or top.get("file") == str(overlay):
            return
        with contextlib.suppress(QmpError):
            await qmp.execute("blockdev-del", 30.0, **{"node-name": node})
        raise unanswered
    finally:
        await qmp.close()


async def grow_disk(vm: Monitored, size_bytes: int) -> None:
    """`block_resize` the root drive (its active overlay); virtio-blk tells the guest."""
    qmp = await vm.qmp()
    try:
        await qmp.execute("block_resize", 60.0, device=DRIVE, size=size_bytes)
    finally:
        await qmp.close()


def _node_of(nodes: list[dict[str, Any]], path: Path) -> str | None:
    """The name of the node that opened `path` (the format node, not its protocol node)."""
    for n in nodes:
        if n.get("file") == str(path) and n.get("drv") in ("raw", "qcow2"):
            image = n.get("image") or {}
            if image.get("filename") == str(path):
                return str(n["node-name"])
    return None


async def stream_disk(vm: Monitored, base: Path, timeout: float = STREAM_TIMEOUT) -> None:
    """Copy the layers between the guest's overlay and `base` into the overlay and drop them;
    the overlay then stands on `base` directly. Waits for the job; QmpError if it failed."""
    qmp = await vm.qmp()
    job = f"sanbox-stream-{secrets.token_hex(4)}"
    try:
        nodes = await qmp.execute("query-named-block-nodes", flat=True) or []
        base_node = _node_of(nodes, base)
        if base_node is None:
            raise QmpError(f"the VM's disk chain does not reach {base}")
        args: dict[str, Any] = {
            "job-id": job,
            "device": DRIVE,
            "base-node": base_node,
            "auto-dismiss": False,
        }
        await qmp.execute("block-stream", 30.0, **args)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            jobs = await qmp.execute("query-jobs") or []
            mine = next((j for j in jobs if j.get("id") == job), None)
            if mine is None:
                raise QmpError("the disk stream job vanished")
            if mine.get("status") == "concluded":
                await qmp.execute("job-dismiss", id=job)
                if mine.get("error"):
                    raise QmpError(f"streaming the disk failed: {mine['error']}")
                return
            if loop.time() > deadline:
                with contextlib.suppress(QmpError):
                    await qmp.execute("job-cancel", id=job)
                raise QmpError(f"streaming the disk took longer than {timeout:.0f}s")
            await asyncio.sleep(0.05)
    finally:
        await qmp.close()
