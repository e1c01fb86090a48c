"""The fleet's hosts as the API's routes reach them (docs/fleet.md): one-time join tokens and
joins, over the fleet's database layer (`sanbox.fleet`) and CAs (`<home>/fleet/`)."""

from __future__ import annotations

from pathlib import Path

from ..fleet.hosts import HostSpec
from ..fleet.join import Joined, join, make_token
from ..fleet.link.pki import FleetCAs
from ..store import Database


class FleetHosts:
    def __init__(self, db: Database, home: Path) -> None:
        self.db = db
        self.cas = FleetCAs(home / "fleet")

    def token(self, region: str, ttl: float) -> str:
        return make_token(self.db, region, ttl)

    def join(self, token: str, spec: HostSpec, addresses: list[str], csr_pem: str) -> Joined:
        return join(self.db, self.cas, token, spec, addresses, csr_pem)
