"""What each placement reserved on a host, recorded beside the host's `alloc_*` it adds to, with
the API node that holds it: a reservation is given back once (`release` deletes its record and
only then takes its share off the host: a second release does nothing), by its holder when the
work ends, or for it when that node starts again (`abandon_node`: none of its work runs then) or
has held it longer than any work takes (`sweep_stale`: the node died and did not come back).
Before, a node that died between reserving and releasing left the host counting it for ever."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Connection, case, delete, insert, update
from sqlalchemy.sql.elements import ColumnElement

from ..store import Database
from ..store.fleet_models import HostRow, ReservationRow
from ..store.repo import new_id
from . import clock

STALE = 6 * 3600.0  # seconds: longer than any work holds one (a build: 4 hours at most)


@dataclass(frozen=True)
class Share:
    vcpus: int
    memory_mib: int
    disk_bytes: int


def record(conn: Connection, host_id: str, share: Share, node: str | None) -> str:
    """Record a reservation just added to the host's `alloc_*` (same transaction); its id."""
    reservation_id = new_id("rsv_")
    conn.execute(
        insert(ReservationRow).values(
            id=reservation_id,
            host_id=host_id,
            node=node,
            vcpus=share.vcpus,
            memory_mib=share.memory_mib,
            disk_bytes=share.disk_bytes,
            created_at=clock.now(conn.dialect),
        )
    )
    return reservation_id


_R = ReservationRow.__table__.c


def release(db: Database, reservation_id: str) -> bool:
    """Give a reservation back; False if it was given back already."""
    return bool(_give_back(db, lambda _conn: _R.id == reservation_id))


def abandon_node(db: Database, node: str) -> int:
    """Give back every reservation `node` holds (it started again: none of its work runs)."""
    return _give_back(db, lambda _conn: _R.node == node)


def sweep_stale(db: Database, older_than: float = STALE) -> int:
    """Give back the reservations held longer than `older_than` seconds."""
    return _give_back(db, lambda conn: _R.created_at < clock.at(conn.dialect, -older_than))


def _give_back(db: Database, which: Callable[[Connection], ColumnElement[bool]]) -> int:
    """Delete the reservations `which` selects and take each one's share off its host, in one
    transaction (a reservation deleted by another at once is not taken off twice)."""
    h = HostRow.__table__.c
    with db.engine.begin() as conn:
        gone = conn.execute(
            delete(ReservationRow)
            .where(which(conn))
            .returning(_R.host_id, _R.vcpus, _R.memory_mib, _R.disk_bytes)
        ).all()
        for host_id, vcpus, memory_mib, disk_bytes in gone:
            conn.execute(
                update(HostRow)
                .where(h.id == host_id)
                .values(
                    alloc_vcpus=_minus(h.alloc_vcpus, vcpus),
                    alloc_memory_mib=_minus(h.alloc_memory_mib, memory_mib),
                    alloc_disk_bytes=_minus(h.alloc_disk_bytes, disk_bytes),
                )
            )
    return len(gone)


def _minus(column: ColumnElement[int], n: int) -> ColumnElement[int]:
    return case((column >= n, column - n), else_=0)
