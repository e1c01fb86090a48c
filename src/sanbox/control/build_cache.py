"""An org's build cache: the disk-only snapshots a template build keeps under each step's key
(see `template_build`), and pruning the ones none of the org's templates stands on.

A step is kept when its layer is in the chain under a template's built disk: a rebuild of any
template of the org still reuses every step it has. What goes is a step of an older version of a
spec (a changed step orphans it and every step after it) and every step of a template removed
with `template rm`. Computers, snapshots and ready snapshots keep the layers they stand on
whatever happens here: a layer is deleted only when nothing references it. Builds wait while a
prune runs, and a prune is refused while one builds, so no build starts from a step that goes."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import select

from ..store import repo
from ..store.models import BuildStepRow, Org, SnapshotRow
from .build_run import BUILDS
from .errors import ConflictError
from .fleet import Fleet


@dataclass(frozen=True)
class Pruned:
    removed_steps: int  # cached steps deleted
    kept_steps: int  # cached steps the org's templates stand on
    freed_bytes: int  # on the host's disk


async def prune(fleet: Fleet, org: Org) -> Pruned:
    """Delete the org's cached build steps that no template of it stands on."""
    if BUILDS.locked():
        raise ConflictError(
            "a template build is running: prune the build cache when it is done",
            "template_building",
        )
    async with BUILDS.held(org.id):
        with fleet.db.session() as s:
            tips = [t.snapshot_id for t in repo.list_templates(s, org.id) if t.snapshot_id]
            steps = {row.key: row.snapshot_id for row in repo.build_steps(s, org.id)}
            ids = [*tips, *steps.values()]
            where = select(SnapshotRow.id, SnapshotRow.host_id).where(SnapshotRow.id.in_(ids))
            hosts = {sid: host_id for sid, host_id in s.execute(where)}
        by_host: dict[str | None, list[str]] = defaultdict(list)
        for sid in ids:  # a chain is read on the host that holds it (a region's own)
            by_host[hosts.get(sid)].append(sid)
        chains: dict[str, list[str]] = {}
        for host_id, held in by_host.items():  # of what each holds: not of another's
            answered = await fleet.host_at(host_id).snapshot_layers(held)
            chains |= {sid: answered[sid] for sid in held if sid in answered}
        live = {layer for tip in tips for layer in chains.get(tip, [])}
        dead = {
            key: sid
            for key, sid in steps.items()
            if sid not in tips and not (chains.get(sid) and chains[sid][0] in live)
        }
        with fleet.db.session() as s:  # the records first: a step never names a missing layer
            for key, sid in dead.items():
                if (row := s.get(BuildStepRow, key)) is not None:
                    s.delete(row)
                if (snap := s.get(SnapshotRow, sid)) is not None and snap.state == "layer":
                    s.delete(snap)
        freed = 0
        for host_id in {hosts.get(sid) for sid in dead.values()}:
            gone = sorted(sid for sid in dead.values() if hosts.get(sid) == host_id)
            freed += await fleet.host_at(host_id).delete_snapshots(gone)
    return Pruned(len(dead), len(steps) - len(dead), freed)
