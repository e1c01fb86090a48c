"""Orgs and API keys: who a key is, and the admin verbs over orgs and keys, each in its scope.

- `authenticate` runs on every request and reads the store each time (nothing is cached), so a
  revoke or an expiry applies to the very next request, WebSocket connections included.
  Failed attempts are counted per client address (`failures.FailureLimiter`): past the limit,
  every failed attempt from that address (a wrong, revoked, expired or missing key) is refused
  with `too_many_failures` until the window passes; a right key still opens (the key is checked
  first), so no one can lock a tenant out by failing from its address. Each key has a request
  rate (`rates.KeyRates`): past it, `rate_limited` with the seconds to wait.
- An admin key manages its own org: its keys (list, create, revoke). A host-admin key (the first
  start's, and those another host admin makes) manages every org: it alone creates orgs, keys of
  other orgs and host-admin keys.
- Keys are stored as sha256 hashes with a short prefix in clear to tell them apart; the plaintext
  exists once, in the answer to its creation.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from ..fleet.regions import MAX_REGIONS, set_regions
from ..fleet.regions import check_name as check_region
from ..store import Database, repo
from ..store.models import ApiKey, Org
from . import quotas
from .errors import (
    AuthError,
    ConflictError,
    ForbiddenError,
    InvalidRequestError,
    KeyRefusedError,
    NotFoundError,
    RateLimitedError,
    TooManyFailuresError,
)
from .failures import FailureLimiter
from .names import check_name
from .rates import ORG_SHARE, KeyRates

LAST_USED_STEP = timedelta(minutes=1)  # `last_used_at` is written at most this often per key
MAX_LIFETIME = timedelta(days=10 * 365)
MAX_KEYS = 1000  # usable keys per org: not revoked, not expired (SANBOX_ORG_MAX_KEYS)


@dataclass(frozen=True)
class Principal:
    """Who a request acts as: a key and its org."""

    org: Org
    key: ApiKey

    @property
    def admin(self) -> bool:
        return self.key.admin or self.key.host_admin

    @property
    def host_admin(self) -> bool:
        return self.key.host_admin


def refusal(key: ApiKey, now: datetime) -> str | None:
    """Why a known key opens nothing any more, or None if it still does."""
    if key.revoked_at is not None:
        return (
            f"this API key ({key.prefix}…) was revoked at {key.revoked_at:%Y-%m-%d %H:%M:%S} "
            "UTC: ask an admin of your org for a new one (`sanbox key create`)"
        )
    if key.expires_at is not None and key.expires_at <= now:
        return (
            f"this API key ({key.prefix}…) expired at {key.expires_at:%Y-%m-%d %H:%M:%S} UTC: "
            "create a new one (`sanbox key create`)"
        )
    return None


def expiry(now: datetime, expires_in: float | None, expires_at: datetime | None) -> datetime | None:
    """When a new key stops working: `expires_in` seconds from now, or at `expires_at`."""
    if expires_in is not None and expires_at is not None:
        raise InvalidRequestError("give expires_in or expires_at, not both")
    if expires_in is not None:
        if not 0 < expires_in <= MAX_LIFETIME.total_seconds():
            raise InvalidRequestError("expires_in must be between 1 second and 10 years")
        return now + timedelta(seconds=expires_in)
    if expires_at is not None:
        if expires_at.tzinfo is None:
            raise InvalidRequestError("expires_at needs a time zone (e.g. 2027-01-31T12:00:00Z)")
        if expires_at <= now:
            raise InvalidRequestError("expires_at is in the past")
        if expires_at > now + MAX_LIFETIME:
            raise InvalidRequestError("expires_at is more than 10 years away")
        return expires_at.astimezone(UTC)
    return None


def require_admin(actor: Principal) -> None:
    if not actor.admin:
        raise ForbiddenError("this needs an admin API key", "forbidden")


def require_host_admin(actor: Principal, what: str) -> None:
    if not actor.host_admin:
        raise ForbiddenError(
            f"{what} needs a host-admin API key; an admin key manages its own org "
            f"({actor.org.name}) only",
            "forbidden",
        )


def _limited(rates: KeyRates, bucket: str, now: float, who: str) -> None:
    """One request from `bucket`, or RateLimitedError saying `who` is over its rate."""
    wait = rates.take(bucket, now)
    if wait is not None:
        retry = max(1, math.ceil(wait))
        raise RateLimitedError(
            f"{who} is over its request rate ({rates.rate:g}/s, bursts of {rates.burst}"
            f"{rates.share.across()}): try again in {retry} s",
            retry,
        )


class Keys:
    """The control plane's door for orgs and keys. `clock` is wall-clock seconds (time.time)."""

    def __init__(
        self,
        db: Database,
        clock: Callable[[], float] = time.time,
        failures: FailureLimiter | None = None,
        rates: KeyRates | None = None,
        max_keys: int = MAX_KEYS,
    ) -> None:
        self.db = db
        self.clock = clock
        self.max_keys = max_keys
        # `is None`, not `or`: an empty table has no length and would be replaced
        self.failures = FailureLimiter() if failures is None else failures
        self.rates = KeyRates() if rates is None else rates
        org = self.rates.rate * ORG_SHARE, self.rates.burst * ORG_SHARE
        self.org_rates = KeyRates(*org, capacity=self.rates.capacity, share=self.rates.share)

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)

    # who is calling ---------------------------------------------------------------------------

    def authenticate(self, token: str | None, client: str) -> Principal:
        """The principal of a presented key, or AuthError / KeyRefusedError (401),
        TooManyFailuresError (429) for a failed attempt from an address past its failures, or
        RateLimitedError (429) for a key past its request rate.

        The key is checked first: a right key is never refused for failures others made from its
        address (a shared NAT, a proxy, an attacker who wants it locked out). A guesser gains
        nothing from that: keys hold 256 random bits (`store.repo.create_key`), and past
        the limit every wrong key still gets 429 and counts."""
        seconds = self.clock()
        if not token:
            self._refuse(client, seconds)
            raise AuthError("missing API key: send `Authorization: Bearer <key>`", "unauthorized")
        now = datetime.fromtimestamp(seconds, UTC)
        with self.db.session() as s:
            key, org = repo.key_and_org(s, token)
            why = _refusal(key, org, now)
        if key is None or org is None:
            self._refuse(client, seconds)
            self.failures.failed(client, seconds)
            raise AuthError("invalid API key", "unauthorized")
        if why is not None:
            self._refuse(client, seconds)
            self.failures.failed(client, seconds)
            raise KeyRefusedError(why, key.id, key.prefix, key.org_id)
        self.take(key, seconds)
        return Principal(org=org, key=key)

    def _refuse(self, client: str, seconds: float) -> None:
        """TooManyFailuresError if `client` is past its failed authentications."""
        wait = self.failures.retry_after(client, seconds)
        if wait is not None:
            self.failures.failed(client, seconds)  # the attempt failed too: it keeps counting
            retry = math.ceil(wait)
            raise TooManyFailuresError(
                f"too many failed authentications from {client}: try again in {retry} s", retry
            )

    def take(self, key: ApiKey, seconds: float | None = None) -> None:
        """One request of the key's rate and its org's, or RateLimitedError."""
        now = self.clock() if seconds is None else seconds
        _limited(self.rates, key.id, now, f"this API key ({key.prefix}…)")
        self.take_org(key.org_id, now)

    def take_org(self, org_id: str, seconds: float | None = None) -> None:
        """One request of the org's rate (all its keys' and its sandboxes' envd calls), or
        RateLimitedError."""
        now = self.clock() if seconds is None else seconds
        _limited(self.org_rates, org_id, now, "this org (all its keys and sandboxes together)")

    def usable_key(self, key_id: str) -> ApiKey | None:
        """A key by id if it still opens anything (a port cookie names the key it came from);
        RateLimitedError past its request rate."""
        with self.db.session() as s:
            key = repo.key_by_id(s, key_id)
        if key is None or refusal(key, self.now()) is not None:
            return None
        self.take(key)
        return key

    def stands(self, token: str | None) -> bool:
        """Whether a presented key still opens its org: a live connection's re-check (no request
        taken, no failure counted; the connection was let in by `authenticate`)."""
        if not token:
            return False
        now = self.now()
        with self.db.session() as s:
            key, org = repo.key_and_org(s, token)
            return key is not None and org is not None and _refusal(key, org, now) is None

    def principal_of(self, key_id: str, take: bool = True) -> Principal:
        """The principal of a key known by id (a console session names the key it was made
        from), checked as `authenticate` checks a presented key: AuthError if it is gone,
        KeyRefusedError if revoked or expired, RateLimitedError past its request rate (`take`:
        counted as a request; a live stream's re-check is not one)."""
        now = self.now()
        with self.db.session() as s:
            key = repo.key_by_id(s, key_id)
            org, why = _standing(s, key, now)
        if key is None or org is None:
            raise AuthError("this session's API key no longer exists", "unauthorized")
        if why is not None:
            raise KeyRefusedError(why, key.id, key.prefix, key.org_id)
        if take:
            self.take(key)
        return Principal(org=org, key=key)

    # orgs -------------------------------------------------------------------------------------

    def create_org(self, actor: Principal, name: str) -> Org:
        require_host_admin(actor, "creating an org")
        check_name(name)
        with self.db.session() as s:
            if repo.org_by_name(s, name) is not None:
                raise ConflictError(f"an org named {name!r} already exists", "name_taken")
            return repo.create_org(s, name)

    def list_orgs(self, actor: Principal) -> Sequence[Org]:
        """Every org for a host admin; an admin sees its own."""
        require_admin(actor)
        if not actor.host_admin:
            return [actor.org]
        with self.db.session() as s:
            return repo.list_orgs(s)

    def quota(self, actor: Principal, org: str) -> tuple[str, quotas.Quota, quotas.Use]:
        """An org's quota and what it uses now: any key reads its own org's, a host-admin key
        any org's."""
        target = self._org(actor, org, f"reading the quota of org {org!r}")
        with self.db.session() as s:
            return target.name, quotas.get(s, target.id), quotas.use(s, target.id)

    def set_quota(self, actor: Principal, org: str, quota: quotas.Quota) -> Org:
        """Replace an org's quota (host-admin key only, its own org's too: a tenant's admin
        raising its own limit would make the limit meaningless)."""
        require_host_admin(actor, f"setting the quota of org {org!r}")
        for name, value in asdict(quota).items():
            if value is not None and not 0 <= value <= quotas.MAX_LIMIT:
                raise InvalidRequestError(f"{name} must be between 0 and {quotas.MAX_LIMIT}")
        target = self._org(actor, org)
        with self.db.session() as s:
            quotas.set_quota(s, target.id, quota)
        return target

    def regions(self, actor: Principal, org: str) -> tuple[str, str | None, list[str]]:
        """An org's home region and the others it may use (any key: its own; host admin: any).
        No home region: its computers may run in any (one host, or a fleet without regions)."""
        target = self._org(actor, org, f"reading the regions of org {org!r}")
        with self.db.session() as s:
            row = s.get_one(Org, target.id)
            return row.name, row.home_region, list(row.regions or [])

    def set_regions(self, actor: Principal, org: str, home: str | None, others: list[str]) -> Org:
        """Set an org's home region and the others it may use (host-admin key only: where a
        tenant's data may be is the operator's promise). Computers keep the region they have."""
        require_host_admin(actor, f"setting the regions of org {org!r}")
        for region in ([home] if home else []) + others:
            check_region(region)
        if len(set(others)) > MAX_REGIONS:
            raise InvalidRequestError(f"at most {MAX_REGIONS} regions besides the home region")
        if others and home is None:
            raise InvalidRequestError("other regions need a home region: set --home too")
        target = self._org(actor, org)
        set_regions(self.db, target.id, home, others)
        return target

    # keys -------------------------------------------------------------------------------------

    def _org(self, actor: Principal, name: str | None, what: str | None = None) -> Org:
        """The org an admin verb acts on: the actor's own, or (host admins only) another."""
        if name is None or name == actor.org.name:
            return actor.org
        require_host_admin(actor, what or f"managing the keys of org {name!r}")
        with self.db.session() as s:
            org = repo.org_by_name(s, name)
        if org is None:
            raise NotFoundError(f"no org named {name!r}: `sanbox org create` it", "org_not_found")
        return org

    def create_key(
        self,
        actor: Principal,
        org: str | None = None,
        name: str = "",
        admin: bool = False,
        host_admin: bool = False,
        expires_in: float | None = None,
        expires_at: datetime | None = None,
    ) -> tuple[ApiKey, Org, str]:
        """A new key of `org` (default: the actor's); returns it, its org and its plaintext."""
        require_admin(actor)
        if host_admin:
            require_host_admin(actor, "creating a host-admin key")
        target = self._org(actor, org)
        now = self.now()
        ends = expiry(now, expires_in, expires_at)
        with self.db.session() as s:
            usable = repo.usable_keys(s, target.id, now)  # the org's row locked until commit
            if usable >= self.max_keys:
                raise InvalidRequestError(
                    f"org {target.name} has {usable} usable API keys, the most it may: revoke "
                    "one it no longer needs (`sanbox key ls`, `sanbox key revoke ID`) first",
                    "too_many_keys",
                )
            key, plaintext = repo.create_key(s, target, name, admin, host_admin, ends)
        return key, target, plaintext

    def list_keys(self, actor: Principal, org: str | None = None) -> list[tuple[ApiKey, str]]:
        """Keys (never their plaintext) with their org's name: the actor's org, or for a host
        admin every org (`org=None`) or the one named."""
        require_admin(actor)
        with self.db.session() as s:
            if org is None and actor.host_admin:
                keys, names = repo.list_keys(s, None), {o.id: o.name for o in repo.list_orgs(s)}
                return [(k, names.get(k.org_id, k.org_id)) for k in keys]
        target = self._org(actor, org)
        with self.db.session() as s:
            return [(k, target.name) for k in repo.list_keys(s, target.id)]

    def revoke(self, actor: Principal, key_id: str) -> tuple[ApiKey, str]:
        """Revoke a key of the actor's org (any org for a host admin; a host-admin key only by a
        host admin): it gets 401 from the next request on. Revoking a revoked key changes
        nothing. The last usable host-admin key stays: without one no org could be made again."""
        require_admin(actor)
        now = self.now()
        with self.db.session() as s:
            key = repo.key_by_id(s, key_id)
            if key is None or not (actor.host_admin or key.org_id == actor.org.id):
                raise NotFoundError(
                    f"no key {key_id!r} in your org: see `sanbox key ls`", "key_not_found"
                )
            if key.host_admin:
                require_host_admin(actor, "revoking a host-admin key")
            org = repo.org_by_id(s, key.org_id)
            if key.revoked_at is None:
                others = [k for k in repo.active_host_admins(s, now) if k.id != key.id]
                if key.host_admin and refusal(key, now) is None and not others:
                    raise ConflictError(
                        f"{key.id} is the last host-admin key: create another "
                        "(`sanbox key create --host-admin`) before revoking it",
                        "last_host_admin_key",
                    )
                key.revoked_at = now
        return key, org.name if org is not None else key.org_id


def _standing(s: Session, key: ApiKey | None, now: datetime) -> tuple[Org | None, str | None]:
    """A looked-up key's org and why it opens nothing (None: it does), as `_refusal` says."""
    if key is None:
        return None, None
    org = repo.org_by_id(s, key.org_id)
    return org, _refusal(key, org, now)


def _refusal(key: ApiKey | None, org: Org | None, now: datetime) -> str | None:
    """Why a key of `org` opens nothing (None: it does); a key in use is marked used (at most
    every LAST_USED_STEP, so reads do not all write)."""
    if key is None:
        return None
    why = refusal(key, now)
    if org is not None and why is None:
        last = key.last_used_at
        if last is None or now - last >= LAST_USED_STEP:
            key.last_used_at = now
    return why
