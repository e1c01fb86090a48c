"""What a host agent serves of what is carried between hosts (host/machines/carry.py): the
files an export made, streamed out (`GET /v1/host/exports/{id}/{name}`), and a disk or a
snapshot taken in from one stream (`PUT /v1/host/imports/disks|snapshots/{id}`, its export's
facts and the image under it in the `Sanbox-Disk` header as JSON). What comes in is bounded by
what its header announced, which must fit the host's disk room (`HostRoom.carried`: the files,
written at once, whole; a disk's growth past its file, to its guest's size, as a thin disk's
promise); a disk may be at most its guest's size and `DISK_SLACK` of metadata."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ...host.door import GIB, DiskExport, HostError, SnapshotExport
from ...host.machines import carry
from . import wire

if TYPE_CHECKING:
    from .agent import HostAgent

log = logging.getLogger(__name__)

DISK_HEADER = "Sanbox-Disk"  # an import's export facts and image, as JSON
DISK_SLACK = 1 << 26  # a carried qcow2 file holds at most its guest's size and this metadata


async def export(agent: HostAgent, request: Request) -> Response:
    item_id, name = request.path_params["item_id"], request.path_params["name"]
    try:
        path = carry.export_dir(agent.runtime.data_dir, item_id) / name
    except HostError:
        path = None
    if path is None or name not in carry.NAMES or not path.is_file():
        return refusal(404, "export_not_found", f"no {name} of {item_id} exported here")
    return StreamingResponse(agent.runtime.export_chunks(item_id, name))


async def take(agent: HostAgent, request: Request) -> JSONResponse:
    kind, item_id = request.path_params["kind"], request.path_params["item_id"]
    try:
        meta = json.loads(request.headers.get(DISK_HEADER, ""))
        image = (
            None
            if meta.get("image") is None
            else agent.runtime.build(str(meta["image"]["build_id"]))
        )
        if kind == "disks" and wire.COMPUTER_ID.fullmatch(item_id):
            disk = DiskExport.of(meta["export"])
            size, virtual = disk.size, disk.virtual_size
        elif kind == "snapshots" and wire.SNAPSHOT_ID.fullmatch(item_id) and image:
            snap = SnapshotExport.of(meta["export"])
            size, virtual = snap.size, int(snap.snapshot["disk_bytes"])
        else:
            return refusal(404, "unknown_call", f"nothing to take at {kind}/{item_id}")
    except (ValueError, KeyError, TypeError) as exc:
        return refusal(400, "invalid_call", f"{DISK_HEADER}: {exc}")
    except HostError as exc:
        return JSONResponse({"error": wire.error_out(exc)}, 409)
    if kind == "disks" and size > virtual + DISK_SLACK:
        return refusal(400, "invalid_call", "the disk is larger than its guest's size")
    # its files are written at once: counted whole; a disk may then grow to its guest's size,
    # a thin disk's promise (a snapshot's disk becomes a layer, which grows no more)
    growth = max(0, virtual - size) if kind == "disks" else 0
    try:
        with agent.room.carried(size, -(-growth // GIB)):
            if kind == "disks":
                await agent.runtime.import_disk(item_id, disk, image, request.stream())
                return JSONResponse({"value": None})
            assert image is not None
            made = await agent.runtime.import_snapshot(item_id, snap, image, request.stream())
            return JSONResponse({"value": wire.plain(made)})
    except (HostError, OSError) as exc:
        log.warning("taking %s %s failed: %s", kind, item_id, exc)
        return JSONResponse({"error": wire.error_out(exc)}, 409)
    except (KeyError, TypeError, ValueError) as exc:  # what it said of its files
        return refusal(400, "invalid_call", f"taking {kind} {item_id}: {exc}")


def refusal(status: int, code: str, message: str) -> JSONResponse:
    """A request the host agent refuses before it is a call: its code and message."""
    return JSONResponse({"error": {"type": "HostError", "code": code, "message": message}}, status)
