"""Open requests per API key and per org: every request a key authenticates (the API's, E2B's,
the console's) holds a place from then until it ends, a WebSocket or a followed stream (events,
a download, a build log) for its whole life. Past `per_key` for the key or `per_org` for its org,
the next is refused 429 `too_many_open_requests` before it does anything, so no tenant grows the
server's connections, tasks and buffers without bound however slowly it opens them (the request
rate bounds how fast, not how many stay open). A refused request holds nothing.

`OpenRequests` is the ASGI middleware that ends every hold with its request; `hold` is what an
authentication calls once it knows the key (`api/auth.py`, `e2b/routing.py`,
`console/access.py`). A request holds one place whatever checks it again meanwhile. A caller
served before the middleware shares its `OpenCounts` and ends its requests' holds itself: the
E2B gateway's envd calls (`serving`, then `hold` once a sandbox's token is checked), and, for a
`with` block, the published-port relay (`api/published.py`) and a sandbox's ports: `holding`.
A sandbox's E2B tokens (envd's, its ports' traffic token) hold places as one key of their own,
in a count of its org's sandboxes apart from its keys' (`sandbox_holder`).

The counts are this process's; with several API nodes each allows its share of every bound
(`fleet/node_share.py`: the bound over the live nodes, rounded up, at least 1), so a tenant that
spreads its streams over the nodes holds the bound across them, not once per node."""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Iterator

from starlette.types import ASGIApp, Receive, Scope, Send

from ..control.errors import TooManyRequestsError
from ..fleet.node_share import NodeShare

PER_KEY = 256  # open at once per API key (SANBOX_OPEN_REQUESTS_PER_KEY)
PER_ORG = 1024  # ... and per org, all its keys (SANBOX_OPEN_REQUESTS_PER_ORG)
_HELD = "sanbox.open_request"
_SANDBOX = "sandbox:"  # a sandbox's tokens, as a key: never an API key's id (`key_...`)


def sandbox_holder(computer_id: str, org_id: str) -> tuple[str, str]:
    """The key a sandbox's E2B tokens hold places as (its envd calls, its ports' connections),
    and the count of its org they go in: the org's sandboxes', apart from its API keys' (a
    sandbox's token, which an org may hand to its users, never takes the org's API from it)."""
    return _SANDBOX + computer_id, _SANDBOX + org_id


def _holder(key_id: str) -> str:
    return "this sandbox's token" if key_id.startswith(_SANDBOX) else "this API key"


def _org(org_id: str) -> str:
    return "this org's sandboxes" if org_id.startswith(_SANDBOX) else "this org's keys"


class OpenCounts:
    """The open requests of every key and org on this server, and their bounds (the whole
    bounds; `share` says how many API nodes hold them now)."""

    def __init__(
        self, per_key: int = PER_KEY, per_org: int = PER_ORG, share: NodeShare | None = None
    ) -> None:
        self.per_key, self.per_org = per_key, per_org
        self.share = NodeShare() if share is None else share
        self.keys: collections.Counter[str] = collections.Counter()
        self.orgs: collections.Counter[str] = collections.Counter()
        self.lock = threading.Lock()  # a check may run in a worker thread

    def take(self, key_id: str, org_id: str) -> None:
        per_key, per_org = self.share.of(self.per_key), self.share.of(self.per_org)
        with self.lock:
            if self.keys[key_id] >= per_key:
                raise self._refused(f"{_holder(key_id)} has {per_key}", self.per_key)
            if self.orgs[org_id] >= per_org:
                raise self._refused(f"{_org(org_id)} have {per_org}", self.per_org)
            self.keys[key_id] += 1
            self.orgs[org_id] += 1

    def _refused(self, who_has: str, bound: int) -> TooManyRequestsError:
        """The refusal, saying where it was counted when this node holds a share of `bound`."""
        nodes = self.share.nodes
        here = f" on this API node (its share of {bound}, {nodes} nodes)" if nodes > 1 else ""
        return TooManyRequestsError(
            f"{who_has} requests open{here} (streams, WebSockets, downloads): close some, then "
            "try again",
            1,
            "too_many_open_requests",
        )

    def give_back(self, key_id: str, org_id: str) -> None:
        with self.lock:
            for counter, name in ((self.keys, key_id), (self.orgs, org_id)):
                counter[name] -= 1
                if counter[name] <= 0:
                    del counter[name]


class _Held:
    """One request's place, taken at most once."""

    def __init__(self, counts: OpenCounts) -> None:
        self.counts = counts
        self.by: tuple[str, str] | None = None

    def take(self, key_id: str, org_id: str) -> None:
        if self.by is None:
            self.counts.take(key_id, org_id)
            self.by = (key_id, org_id)

    def release(self) -> None:
        if self.by is not None:
            self.counts.give_back(*self.by)
            self.by = None


class OpenRequests:
    def __init__(
        self,
        app: ASGIApp,
        per_key: int = PER_KEY,
        per_org: int = PER_ORG,
        counts: OpenCounts | None = None,
    ) -> None:
        self.app = app
        self.counts = counts if counts is not None else OpenCounts(per_key, per_org)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        with serving(self.counts, scope):
            await self.app(scope, receive, send)


@contextlib.contextmanager
def serving(counts: OpenCounts, scope: Scope) -> Iterator[None]:
    """The request in `scope` may `hold` a place in `counts`, given back when the block ends."""
    held = _Held(counts)
    scope.setdefault("state", {})[_HELD] = held
    try:
        yield
    finally:
        held.release()


def hold(scope: Scope, key_id: str, org_id: str) -> None:
    """The request holds a place for its key and org until it ends (TooManyRequestsError if
    none is left); nothing where no `OpenRequests` serves it."""
    held = scope.get("state", {}).get(_HELD)
    if isinstance(held, _Held):
        held.take(key_id, org_id)


@contextlib.contextmanager
def holding(counts: OpenCounts, key_id: str, org_id: str) -> Iterator[None]:
    """A place for the key and its org, held for the `with` block (TooManyRequestsError if none
    is left, before the block runs): for a caller that `OpenRequests` does not serve."""
    counts.take(key_id, org_id)
    try:
        yield
    finally:
        counts.give_back(key_id, org_id)
