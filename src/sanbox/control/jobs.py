"""The control plane's singleton jobs: of all the API nodes over one PostgreSQL database, one
runs each of these at a time, the holder of its advisory lock (fleet/singleton.py). When that
node dies, its session ends, and another node takes the job at its next round (seconds). On
SQLite there is one node: it runs them all.

- `reconciler`: records computers on fleet hosts whose VM died or stopped on a disk error, and
  sweeps operations a node left (each node still watches the VMs of its own in-process host);
- `idle`: suspends idle computers (every node keeps storing the use it serves, for it);
- `deadlines`: enforces lifetimes and idle stops;
- `pools`: refills warm pools;
- `usage`: closes and cuts usage intervals (each node samples the guests it holds);
- `hosts`: renews fleet hosts' leases and marks the silent ones.

The fleet hosts' egress is not one of them: each node converges the hosts at once after a
change it made (a round is idempotent; a host's denials are drained by whichever node asks).

Each lock's session is named `sanbox-job <job> <node>` (its application_name), so who runs what
is one query away, for `GET /v1/fleet/jobs` and for an operator at `psql`."""

from __future__ import annotations

import asyncio

from sqlalchemy import text

from ..fleet.singleton import Singleton
from ..store import Database

RECONCILER, IDLE, DEADLINES, POOLS, USAGE, HOSTS = (
    "reconciler",
    "idle",
    "deadlines",
    "pools",
    "usage",
    "hosts",
)
NAMES = (RECONCILER, IDLE, DEADLINES, POOLS, USAGE, HOSTS)
LABEL = "sanbox-job"

HOLDERS = text(
    "select a.application_name from pg_locks l join pg_stat_activity a on a.pid = l.pid "
    "where l.locktype = 'advisory' and l.granted and a.application_name like :label"
)


class Jobs:
    def __init__(self, db: Database, node: str) -> None:
        self.db, self.node = db, node
        self._locks = {
            name: Singleton(db.url, f"sanbox.{name}", label=f"{LABEL} {name} {node}")
            for name in NAMES
        }

    async def holds(self, name: str) -> bool:
        """Whether this node runs job `name` now (taking it if it is free): ask before each
        round of the job."""
        return await asyncio.to_thread(self._locks[name].held)

    def held(self) -> list[str]:
        """The jobs this node held at its last look, without asking the database."""
        return [name for name, lock in self._locks.items() if lock.holding]

    def holders(self) -> dict[str, str | None]:
        """Each job's node now, from the database's locks (None: no node holds it; between a
        holder's death and the next round of another node)."""
        if self.db.engine.dialect.name != "postgresql":
            return dict.fromkeys(NAMES, self.node)
        found: dict[str, str | None] = dict.fromkeys(NAMES)
        with self.db.engine.connect() as conn:
            for (label,) in conn.execute(HOLDERS, {"label": f"{LABEL} %"}):
                _tag, name, node = str(label).split(" ", 2)
                if name in found:
                    found[name] = node
        return found

    def close(self) -> None:
        """Let the jobs go (another node takes them at its next round)."""
        for lock in self._locks.values():
            lock.close()
