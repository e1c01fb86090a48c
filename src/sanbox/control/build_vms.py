"""The VMs template builds run on fleet hosts, recorded while they run (`build_vms`, written
before the VM is made): every node's egress watch keeps their egress (`fleet_egress.py`), and no
host's settling takes one for a stranger (`hosts.py`). A node that starts again destroys what
its previous life left (`end_left`)."""

from __future__ import annotations

import contextlib
import logging
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import delete, select

from ..store import Database
from ..store.fleet_models import BuildVmRow

if TYPE_CHECKING:
    from .fleet import Fleet


log = logging.getLogger(__name__)


def build_vcpus(host_cpus: int) -> int:
    """A build VM's vCPUs: two at most (installs are mostly one process), a core of the host left
    to the rest: a guest with more vCPUs than the host runs at once stalls in its own
    spinlocks."""
    return max(1, min(2, host_cpus - 1))


@contextlib.contextmanager
def recorded(
    db: Database, vm_id: str, org_id: str, template: str, host_id: str, node: str
) -> Iterator[None]:
    """The build VM's record for the block."""
    with db.session() as s:
        s.add(BuildVmRow(id=vm_id, org_id=org_id, template=template, host_id=host_id, node=node))
    try:
        yield
    finally:
        with db.session() as s:
            s.execute(delete(BuildVmRow).where(BuildVmRow.id == vm_id))


def on_host(db: Database, host_id: str) -> set[str]:
    with db.session() as s:
        return set(s.scalars(select(BuildVmRow.id).where(BuildVmRow.host_id == host_id)))


def running(db: Database) -> dict[str, list[str]]:
    """Every recorded build VM, by host id."""
    found: dict[str, list[str]] = defaultdict(list)
    with db.session() as s:
        for vm_id, host_id in s.execute(select(BuildVmRow.id, BuildVmRow.host_id)):
            found[host_id].append(vm_id)
    return found


async def end_left(fleet: Fleet, before: datetime) -> int:
    """Destroy the build VMs this node's previous life (recorded `before` this one began) left on
    fleet hosts (none of its builds runs now) and forget them; one whose host does not answer
    keeps its record until the next time. How many went."""
    with fleet.db.session() as s:
        left = s.execute(
            select(BuildVmRow.id, BuildVmRow.host_id).where(
                BuildVmRow.node == fleet.node, BuildVmRow.created_at < before
            )
        ).all()
    gone = 0
    for vm_id, host_id in left:
        try:
            await fleet.host_at(host_id).destroy(vm_id)
        except Exception as exc:  # its host does not answer now
            log.warning("build VM %s left on host %s stays for now: %s", vm_id, host_id, exc)
            continue
        with fleet.db.session() as s:
            s.execute(delete(BuildVmRow).where(BuildVmRow.id == vm_id))
        gone += 1
    return gone
