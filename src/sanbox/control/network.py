"""A computer's network as the user sees it: its egress allowlist (changed live, closing flows it
no longer allows), the attempts it denied (events, without payloads), and its published ports."""

from __future__ import annotations

import contextlib

from ..host.door import Denial, HostError, PolicyError
from ..store import repo
from ..store.models import ComputerRow, Org
from .errors import InvalidRequestError, NotFoundError
from .fleet import VERB_WAIT, Fleet
from .names import check_port


def denied(fleet: Fleet, computer_id: str, denial: Denial) -> None:
    """Record a denied attempt as an event. The egress gateway rate-limits them per computer
    (`host.egress.denials`); a denial carries the count of those it held back."""
    with contextlib.suppress(NotFoundError):  # deleted meanwhile
        fleet.record(computer_id, None, "network.denied", denial.message(), denial.data())


async def set_allow(fleet: Fleet, org: Org, ref: str, rules: list[str]) -> tuple[ComputerRow, int]:
    """Replace the allowlist; applied at once (on a fleet host that does not answer now: when it
    does, by `fleet_egress.py`). Returns the record and the flows closed."""
    try:
        policy = fleet.reach.policy(rules)
    except PolicyError as exc:
        raise InvalidRequestError(str(exc), "invalid_rule") from exc
    row = fleet.get(org, ref)
    async with fleet.operating(row.id, "network", row.host_id, wait=VERB_WAIT):
        listed = ", ".join(policy.rules()) or "nothing"
        row = fleet.record(
            row.id,
            None,
            "network.policy",
            f"egress allowlist: {listed}",
            {"allow": policy.rules()},
            allow=policy.rules(),
        )
        closed = 0
        egress = fleet.egress_of(row)
        away = None  # why a fleet host did not take it now
        try:
            closed = await egress.update(row.id, policy) if egress is not None else 0
        except HostError as exc:
            if row.host_id is None or exc.code != "host_unreachable":
                raise  # refused (a fleet host's: the egress watch turns its egress off)
            away = str(exc)
        if egress is None and row.host_id is not None and fleet.far is not None:
            away = "it does not answer"
        if away is not None:
            why = (
                f"the allowlist is recorded; its host did not take it now ({away}): "
                "it is applied there when the host answers"
            )
            fleet.record(row.id, None, "network.error", why)
        if closed:
            why = f"{closed} open connection(s) no longer allowed were closed"
            fleet.record(row.id, None, "network.flows_closed", why)
    return row, closed


# published ports ------------------------------------------------------------------------


def publish(fleet: Fleet, org: Org, ref: str, port: int, public: bool) -> ComputerRow:
    """Publish `port` (again: with `public` changed). Each publication has an id of its own
    (`publication`) that its view links are bound to: a link made before an unpublish never
    opens the port published again."""
    check_port(port)
    row = fleet.get(org, ref)
    current = next((p for p in row.ports if p["port"] == port), None)
    publication = current.get("publication") if current is not None else None
    entry = {"port": port, "public": public, "publication": publication or repo.new_id("pub_")}
    ports = [p for p in row.ports if p["port"] != port] + [entry]
    ports.sort(key=lambda p: int(p["port"]))
    how = "public" if public else "private (API key required)"
    return fleet.record(
        row.id,
        None,
        "port.published",
        f"port {port} published, {how}",
        {"port": port, "public": public},
        ports=ports,
    )


def unpublish(fleet: Fleet, org: Org, ref: str, port: int) -> ComputerRow:
    row = fleet.get(org, ref)
    if not any(p["port"] == port for p in row.ports):
        raise NotFoundError(f"port {port} of {row.name} is not published", "port_not_found")
    ports = [p for p in row.ports if p["port"] != port]
    return fleet.record(
        row.id, None, "port.unpublished", f"port {port} unpublished", {"port": port}, ports=ports
    )


def find_published(
    fleet: Fleet, org_name: str, name: str, port: int
) -> tuple[ComputerRow, Org, bool]:
    """The computer called `name` in the org called `org_name` that publishes `port`, its org,
    and whether the port is public. Only that org is looked in: another org's computer of the
    same name is never the answer, whatever it publishes."""
    with fleet.db.session() as s:
        org = repo.org_by_name(s, org_name)
        row = repo.computer(s, org.id, name) if org is not None else None
    published = [p for p in row.ports if p["port"] == port] if row is not None else []
    if org is None or row is None or row.name != name or not published:
        raise NotFoundError(
            f"no published port {port} on a computer named {name!r} in org {org_name!r}",
            "port_not_found",
        )
    return row, org, bool(published[0]["public"])


def publication(row: ComputerRow, port: int) -> str:
    """The id of `port`'s current publication on `row` ("" for one published before ids, or by a
    template at create: they get one when published again)."""
    entry = next((p for p in row.ports if p["port"] == port), None)
    return str(entry.get("publication") or "") if entry is not None else ""
