"""A new warm-pool member's warm-up (`pools.py`): what a claim does in the guest, done once before
anyone claims it: a command, its hostname set (to the name a claim that names none will give it:
one request less in the claim), its template's readiness check. The claim and the claimer's
first command then find those paths warm (the agent's code, the kernel's, their pages, and under
TCG their translation: a restored guest starts with none, ~35 ms of a first exec here). A failure
only leaves them colder: the member's health is the reconciler's to judge, its readiness the
claim's.

It holds the member as an operation: a claim that took the member meanwhile waits for it before
it sets its own hostname (which the warm-up's would otherwise overwrite), and a member claimed
before the warm-up began is left to its claim."""

from __future__ import annotations

import logging
from collections.abc import Callable

from . import readiness
from .fleet import Fleet
from .names import generate_name

log = logging.getLogger(__name__)


async def warm(fleet: Fleet, computer_id: str, named: Callable[[str], None]) -> None:
    """Warm the member `computer_id`; `named(hostname)` once its guest has the hostname a claim
    that names none will keep, if it is still a member then."""
    try:
        async with fleet.operating(computer_id, "warm"):
            machine, row = fleet.machines.get(computer_id), fleet.by_id(computer_id)
            if machine is None or row is None or row.pool is None:
                return
            client = await machine.client(timeout=5.0)
            await client.exec(["true"], timeout=10.0, max_output=0)
            name = generate_name()
            await client.set_hostname(name)
            now = fleet.by_id(computer_id)  # a claim may have taken it meanwhile
            if now is not None and now.pool is not None:
                named(name)
            check = readiness.check_of(fleet, row.org_id, row.template, row.region)
            if check is not None:
                await readiness.probe(machine, check)
    except Exception as exc:  # a warm-up's failure (or a busy member) is not the member's
        log.info("warming pool member %s failed: %s", computer_id, exc)
