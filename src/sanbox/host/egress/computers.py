"""The egress of a host's computers as the control plane drives it through the host's door: by
computer id alone. Each computer's network namespace is this host's to know (`Network.netns`);
the gateway (gateway.py) runs the firewall, DNS filter and proxies in it. `EgressControl` is
what the control plane holds: this class in process, or a fleet host's egress over its link
(`fleet/link/remote_egress.py`)."""

from __future__ import annotations

from typing import Protocol

from ..net import Network
from .gateway import EgressGateway
from .policy import Policy


class EgressControl(Protocol):
    """A host's computers' egress, driven by computer id (ComputersEgress or a fleet host's)."""

    async def start(self, computer_id: str, policy: Policy) -> None: ...

    async def set_policy(self, computer_id: str, policy: Policy) -> None: ...

    async def update(self, computer_id: str, policy: Policy) -> int: ...

    async def stop(self, computer_id: str) -> None: ...

    def policy(self, computer_id: str) -> Policy | None: ...

    def carried(self, computer_id: str) -> int | None: ...

    def open_connections(self, computer_id: str) -> int: ...

    async def close(self) -> None: ...


class ComputersEgress:
    def __init__(self, gateway: EgressGateway, network: Network) -> None:
        self.gateway = gateway
        self.network = network

    async def start(self, computer_id: str, policy: Policy) -> None:
        """Firewall, DNS filter and proxy for a computer that now runs (idempotent)."""
        await self.gateway.start(computer_id, self.network.netns(computer_id), policy)

    async def set_policy(self, computer_id: str, policy: Policy) -> None:
        """`policy` for a computer whose egress may run already (a warm pool's member at its
        claim): updated in place, else started."""
        await self.gateway.set_policy(computer_id, self.network.netns(computer_id), policy)

    async def update(self, computer_id: str, policy: Policy) -> int:
        """Apply a new policy at once; how many open flows it closed."""
        return await self.gateway.update(computer_id, policy)

    async def stop(self, computer_id: str) -> None:
        await self.gateway.stop(computer_id)

    def policy(self, computer_id: str) -> Policy | None:
        return self.gateway.policy(computer_id)

    def carried(self, computer_id: str) -> int | None:
        """Bytes its upstream connections carried while its egress ran (None: not here)."""
        return self.gateway.carried(computer_id)

    def open_connections(self, computer_id: str) -> int:
        return self.gateway.open_connections(computer_id)

    async def close(self) -> None:
        await self.gateway.close()
