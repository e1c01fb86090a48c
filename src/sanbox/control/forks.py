"""Forks: N new computers from one computer as it is now, in one call. A running (or paused)
computer's forks carry on from its memory: its processes, open files and tmpfs, each with a new
identity (hostname, machine-id, SSH host keys, fresh entropy, the clock set) before it is handed
out; a stopped computer's forks boot on a copy of its disk. The source keeps running, paused only
while its memory is saved. All or nothing: if one fork cannot be made, none is left."""

from __future__ import annotations

import asyncio
import contextlib
import secrets

from ..store import repo
from ..store.models import ComputerRow, Org
from . import create as creating
from . import lifecycle, snapshots
from .errors import ConflictError, ControlError, InvalidRequestError
from .fleet import Fleet
from .names import check_name
from .snapshots import HAS_MEMORY

MAX_FORKS = 16  # per call


def fork_names(source: str, count: int, prefix: str | None) -> list[str]:
    """`PREFIX` for one fork, `PREFIX-1..N` for several; without a prefix, the source's name and
    a random suffix each (so forking twice never collides)."""
    if not 1 <= count <= MAX_FORKS:
        raise InvalidRequestError(f"ask for 1 to {MAX_FORKS} forks at a time")
    if prefix is not None:
        check_name(prefix, "fork name")
        names = [prefix] if count == 1 else [f"{prefix}-{i}" for i in range(1, count + 1)]
    else:
        alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
        base = source[:52].rstrip("-")
        names = [f"{base}-{''.join(secrets.choice(alphabet) for _ in range(5))}"
                 for _ in range(count)]  # fmt: skip
    for name in names:
        check_name(name, "fork name")
    return names


async def fork(
    fleet: Fleet, org: Org, ref: str, count: int = 1, prefix: str | None = None
) -> list[ComputerRow]:
    source = fleet.get(org, ref)
    names = fork_names(source.name, count, prefix)
    with fleet.db.session() as s:
        taken = [n for n in names if repo.name_taken(s, org.id, n)]
    if taken:
        raise ConflictError(
            f"a computer named {taken[0]!r} already exists: pick another prefix", "name_taken"
        )
    async with fleet.acting(org, ref, "fork") as row:
        snap = await snapshots.take_locked(fleet, row, row.state in HAS_MEMORY, None, hidden=True)
    try:
        results = await asyncio.gather(
            *(creating.create(fleet, org, creating.CreateRequest(name=name, labels=row.labels),
                              snapshot=snap) for name in names),
            return_exceptions=True,
        )  # fmt: skip
    finally:
        await snapshots.remove(fleet, snap)  # the forks' disks keep the layers they stand on
    made = [r for r in results if isinstance(r, ComputerRow)]
    failed = [r for r in results if isinstance(r, BaseException)]
    if failed:
        for child in made:
            with contextlib.suppress(ControlError):
                await lifecycle.delete(fleet, org, child.id)
        error = failed[0]
        if isinstance(error, ControlError):
            raise error
        raise ControlError(f"fork failed: {error}", "fork_failed") from error
    fleet.record(
        row.id, None, "computer.forked", f"forked into {', '.join(r.name for r in made)}",
        {"forks": [r.id for r in made], "memory": snap.memory},
    )  # fmt: skip
    return made
