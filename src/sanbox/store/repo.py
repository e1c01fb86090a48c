"""Repositories: the queries the control plane makes, one function each, over a Session (the
audit table's are in audit_queries.py)."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from contextvars import ContextVar
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, delete, func, or_, select, update
from sqlalchemy.orm import Session

from ..fleet.notify import EVENTS, notify
from .models import (
    ApiKey,
    BuildStepRow,
    ComputerRow,
    EventRow,
    Org,
    PoolRow,
    SecretBindingRow,
    SecretRow,
    SnapshotRow,
    TemplateRow,
)

KEY_PREFIX = "sbk_"
SHOWN = len(KEY_PREFIX) + 8  # the start of a key kept in clear, to tell keys apart

ACTOR: ContextVar[str | None] = ContextVar("sanbox_actor", default=None)
"""The key prefix of the request being served (the API sets it once the key is known); the events
written while it is set, in that request or in the tasks it starts, carry it as their actor."""


def new_id(prefix: str) -> str:
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    return prefix + "".join(secrets.choice(alphabet) for _ in range(12))


def hash_key(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


# orgs ---------------------------------------------------------------------------------------


def create_org(s: Session, name: str) -> Org:
    org = Org(id=new_id("org_"), name=name)
    s.add(org)
    s.flush()
    return org


def org_by_name(s: Session, name: str) -> Org | None:
    return s.scalars(select(Org).where(Org.name == name)).first()


def org_by_id(s: Session, org_id: str) -> Org | None:
    return s.get(Org, org_id)


def list_orgs(s: Session) -> Sequence[Org]:
    return s.scalars(select(Org).order_by(Org.created_at)).all()


# API keys -----------------------------------------------------------------------------------


def usable_keys(s: Session, org_id: str, now: datetime) -> int:
    """How many of the org's keys are usable (not revoked, not expired), its row locked for the
    transaction so that two creates count one after the other (PostgreSQL)."""
    s.execute(select(Org.id).where(Org.id == org_id).with_for_update())
    q = select(func.count()).select_from(ApiKey).where(ApiKey.org_id == org_id)
    q = q.where(ApiKey.revoked_at.is_(None))
    q = q.where(or_(ApiKey.expires_at.is_(None), ApiKey.expires_at > now))
    return int(s.scalar(q) or 0)


def create_key(
    s: Session,
    org: Org,
    name: str = "",
    admin: bool = False,
    host_admin: bool = False,
    expires_at: datetime | None = None,
) -> tuple[ApiKey, str]:
    """A new key; the plaintext is returned once and only its hash is stored."""
    plaintext = KEY_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey(
        id=new_id("key_"),
        org_id=org.id,
        name=name,
        prefix=plaintext[:SHOWN],
        hash=hash_key(plaintext),
        admin=admin or host_admin,
        host_admin=host_admin,
        expires_at=expires_at,
    )
    s.add(key)
    s.flush()
    return key, plaintext


# every request makes this query and `computer`'s: each built once (building a statement, and
# its cache key, cost more than running it)
_KEY_AND_ORG = (
    select(ApiKey, Org)
    .join(Org, Org.id == ApiKey.org_id, isouter=True)
    .where(ApiKey.hash == bindparam("hash"))
)


def key_and_org(s: Session, plaintext: str) -> tuple[ApiKey | None, Org | None]:
    """A presented key and its org, in one query; (None, None) if no key has that hash."""
    found = s.execute(_KEY_AND_ORG, {"hash": hash_key(plaintext)}).first()
    return (None, None) if found is None else (found[0], found[1])


def key_by_id(s: Session, key_id: str) -> ApiKey | None:
    return s.get(ApiKey, key_id)


def count_keys(s: Session) -> int:
    return len(s.scalars(select(ApiKey.id)).all())


def list_keys(s: Session, org_id: str | None) -> Sequence[ApiKey]:
    """Every key (revoked and expired ones too) of an org, or of all orgs."""
    q = select(ApiKey).order_by(ApiKey.created_at, ApiKey.id)
    return s.scalars(q if org_id is None else q.where(ApiKey.org_id == org_id)).all()


def active_host_admins(s: Session, now: datetime) -> Sequence[ApiKey]:
    """The host-admin keys that are neither revoked nor expired."""
    q = select(ApiKey).where(ApiKey.host_admin.is_(True), ApiKey.revoked_at.is_(None))
    return s.scalars(q.where(or_(ApiKey.expires_at.is_(None), ApiKey.expires_at > now))).all()


# computers ----------------------------------------------------------------------------------


_COMPUTER_BY_REF = select(ComputerRow).where(
    ComputerRow.org_id == bindparam("org_id"),
    ComputerRow.pool.is_(None),
    or_(ComputerRow.id == bindparam("ref"), ComputerRow.name == bindparam("ref")),
)


def computer(s: Session, org_id: str, ref: str) -> ComputerRow | None:
    """By id or by name, within an org (not a pool's unclaimed computers: nobody's yet)."""
    found = s.scalars(_COMPUTER_BY_REF, {"org_id": org_id, "ref": ref}).all()
    return next((r for r in found if r.id == ref), found[0] if found else None)


def computer_by_id(s: Session, computer_id: str) -> ComputerRow | None:
    return s.get(ComputerRow, computer_id)


def computer_by_idempotency_key(s: Session, org_id: str, key: str) -> ComputerRow | None:
    q = select(ComputerRow).where(ComputerRow.org_id == org_id)
    return s.scalars(q.where(ComputerRow.idempotency_key == key)).first()


def computers_with_limits(s: Session) -> list[ComputerRow]:
    """Every computer with a lifetime or a max running time (pool members included)."""
    q = select(ComputerRow).where(or_(ComputerRow.lifetime > 0, ComputerRow.max_running > 0))
    return list(s.scalars(q).all())


def list_computers(
    s: Session, org_id: str | None, state: str | None = None, labels: dict[str, str] | None = None
) -> list[ComputerRow]:
    """An org's computers (not its pools' unclaimed ones), or every computer (`org_id` None)."""
    q = select(ComputerRow).order_by(ComputerRow.created_at, ComputerRow.id)
    if org_id is not None:
        q = q.where(ComputerRow.org_id == org_id, ComputerRow.pool.is_(None))
    if state is not None:
        q = q.where(ComputerRow.state == state)
    rows = list(s.scalars(q).all())
    if labels:
        rows = [r for r in rows if all(r.labels.get(k) == v for k, v in labels.items())]
    return rows


def image_builds_in_use(s: Session) -> dict[tuple[str, str | None], int]:
    """How many computers and snapshots (all orgs) use each (template, image build); None: not
    recorded. A snapshot's disk is backed by its build as a computer's is."""
    used: dict[tuple[str, str | None], int] = {}
    for table in (ComputerRow, SnapshotRow):
        q = select(table.template, table.image, func.count()).group_by(table.template, table.image)
        for template, image, count in s.execute(q).all():
            used[(template, image)] = used.get((template, image), 0) + count
    return used


def set_last_active(s: Session, computer_id: str, when: datetime) -> None:
    s.execute(update(ComputerRow).where(ComputerRow.id == computer_id).values(last_active_at=when))


def name_taken(s: Session, org_id: str, name: str) -> bool:
    q = select(ComputerRow.id).where(ComputerRow.org_id == org_id, ComputerRow.name == name)
    return s.scalars(q).first() is not None


# snapshots ----------------------------------------------------------------------------------


def snapshot(s: Session, org_id: str, ref: str, ready_only: bool = True) -> SnapshotRow | None:
    """By id or by name, within an org; only complete ones unless asked."""
    q = select(SnapshotRow).where(SnapshotRow.org_id == org_id)
    if ready_only:
        q = q.where(SnapshotRow.state == "ready")
    found = s.scalars(q.where(SnapshotRow.id == ref)).first()
    return found or s.scalars(q.where(SnapshotRow.name == ref)).first()


def list_snapshots(
    s: Session, org_id: str | None, state: str | None = "ready"
) -> list[SnapshotRow]:
    q = select(SnapshotRow).order_by(SnapshotRow.created_at, SnapshotRow.id)
    if org_id is not None:
        q = q.where(SnapshotRow.org_id == org_id)
    if state is not None:
        q = q.where(SnapshotRow.state == state)
    return list(s.scalars(q).all())


def snapshot_name_taken(s: Session, org_id: str, name: str) -> bool:
    q = select(SnapshotRow.id).where(SnapshotRow.org_id == org_id, SnapshotRow.name == name)
    return s.scalars(q).first() is not None


# templates ----------------------------------------------------------------------------------


def templates_named(s: Session, org_id: str, ref: str, region: str | None) -> list[TemplateRow]:
    """The org's template `ref` (its id: one; its name: one per region it is built in, or only
    the one in `region`)."""
    q = select(TemplateRow).where(TemplateRow.org_id == org_id)
    found = s.scalars(q.where(TemplateRow.id == ref)).first()
    if found is not None:
        return [found] if region is None or found.region == region else []
    q = q.where(TemplateRow.name == ref).order_by(TemplateRow.region)
    if region is not None:
        q = q.where(TemplateRow.region == region)
    return list(s.scalars(q).all())


def list_templates(s: Session, org_id: str | None) -> list[TemplateRow]:
    q = select(TemplateRow).order_by(TemplateRow.name, TemplateRow.region)
    if org_id is not None:
        q = q.where(TemplateRow.org_id == org_id)
    return list(s.scalars(q).all())


def build_steps(s: Session, org_id: str, keys: list[str] | None = None) -> list[BuildStepRow]:
    """The org's cached build steps with these keys (every one without `keys`)."""
    q = select(BuildStepRow).where(BuildStepRow.org_id == org_id)
    if keys is not None:
        q = q.where(BuildStepRow.key.in_(keys))
    return list(s.scalars(q).all())


# pools --------------------------------------------------------------------------------------


def pool(s: Session, org_id: str, template: str) -> PoolRow | None:
    q = select(PoolRow).where(PoolRow.org_id == org_id, PoolRow.template == template)
    return s.scalars(q).first()


def list_pools(s: Session, org_id: str | None) -> list[PoolRow]:
    q = select(PoolRow).order_by(PoolRow.template)
    if org_id is not None:
        q = q.where(PoolRow.org_id == org_id)
    return list(s.scalars(q).all())


def pool_members(s: Session, pool_id: str) -> list[ComputerRow]:
    q = select(ComputerRow).where(ComputerRow.pool == pool_id)
    return list(s.scalars(q.order_by(ComputerRow.created_at, ComputerRow.id)).all())


# secrets ------------------------------------------------------------------------------------


def secret(s: Session, org_id: str, name: str) -> SecretRow | None:
    q = select(SecretRow).where(SecretRow.org_id == org_id, SecretRow.name == name)
    return s.scalars(q).first()


def secret_count(s: Session, org_id: str) -> int:
    """How many secrets the org holds, its row locked for the transaction (PostgreSQL)."""
    s.execute(select(Org.id).where(Org.id == org_id).with_for_update())
    return int(s.scalar(select(func.count()).where(SecretRow.org_id == org_id)) or 0)


def list_secrets(s: Session, org_id: str) -> list[SecretRow]:
    q = select(SecretRow).where(SecretRow.org_id == org_id).order_by(SecretRow.name)
    return list(s.scalars(q).all())


def bindings_of(s: Session, computer_id: str) -> list[tuple[SecretBindingRow, SecretRow]]:
    """A computer's bindings with their secrets, by the secret's name."""
    q = (
        select(SecretBindingRow, SecretRow)
        .join(SecretRow, SecretRow.id == SecretBindingRow.secret_id)
        .where(SecretBindingRow.computer_id == computer_id)
        .order_by(SecretRow.name)
    )
    return [(b, sec) for b, sec in s.execute(q).all()]


def binding(s: Session, secret_id: str, computer_id: str) -> SecretBindingRow | None:
    q = select(SecretBindingRow).where(
        SecretBindingRow.secret_id == secret_id, SecretBindingRow.computer_id == computer_id
    )
    return s.scalars(q).first()


def drop_bindings(
    s: Session, *, secret_id: str | None = None, computer_id: str | None = None
) -> int:
    q = delete(SecretBindingRow)
    if secret_id is not None:
        q = q.where(SecretBindingRow.secret_id == secret_id)
    if computer_id is not None:
        q = q.where(SecretBindingRow.computer_id == computer_id)
    return int(s.execute(q).rowcount)  # type: ignore[attr-defined]


# events -------------------------------------------------------------------------------------


def add_event(
    s: Session,
    org_id: str,
    computer_id: str | None,
    type_: str,
    message: str,
    data: dict[str, Any] | None = None,
) -> EventRow:
    ev = EventRow(
        org_id=org_id,
        computer_id=computer_id,
        type=type_,
        message=message,
        data=data or {},
        actor=ACTOR.get(),
    )
    s.add(ev)
    s.flush()
    notify(s.connection(), EVENTS)  # other API nodes' relays read it at the commit
    return ev


def list_events(s: Session, org_id: str, computer_id: str, limit: int = 500) -> Sequence[EventRow]:
    q = select(EventRow).where(EventRow.org_id == org_id, EventRow.computer_id == computer_id)
    return s.scalars(q.order_by(EventRow.id.desc()).limit(limit)).all()[::-1]


def events_after(s: Session, org_id: str, after_id: int, limit: int = 500) -> Sequence[EventRow]:
    q = select(EventRow).where(EventRow.org_id == org_id, EventRow.id > after_id)
    return s.scalars(q.order_by(EventRow.id).limit(limit)).all()
