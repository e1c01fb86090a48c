"""A computer's VM as the host runtime hands it out: what it was asked to be (`MachineSpec`) and
the running VM with its agent connection (`Machine`). Apart from runtime.py so that the modules it
calls into (suspend.py) can make one without importing it back."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from ..agent import AgentClient
from ..agent.dial import Dial
from ..data.layout import ComputerDir
from ..drivers import VM_ISOLATIONS, NetAttachment, VmHandle, VmNotRunningError


@dataclass(frozen=True)
class MachineSpec:
    computer_id: str
    vcpus: int = 1
    memory_mib: int = 512
    disk_gib: int | None = None  # default: the image's size
    hostname: str = "sanbox"
    net: NetAttachment | None = None


@dataclass
class Machine:
    """One computer's running VM and the agent connection to it."""

    computer_id: str
    dir: ComputerDir
    vm: VmHandle
    agent: AgentClient
    # how to reach the agent again: None, its VM's socket here; else a host agent's tunnel
    dial: Dial | None = field(default=None, repr=False, compare=False)
    _dialing: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False, compare=False)

    @property
    def isolation(self) -> str:
        return self.vm.isolation

    @property
    def isolated(self) -> bool:
        """A VM with its own kernel and disk (anything else, e.g. a test's local process, shares
        the host's files)."""
        return self.vm.isolation in VM_ISOLATIONS

    async def client(self, timeout: float = 10.0) -> AgentClient:
        """The agent connection, dialled again if it was closed (an agent restart, a protocol
        violation): a closed client is never handed out. One dial at a time: the agent serves
        the newest connection, so two would end each other."""
        if not self.vm.alive():
            raise VmNotRunningError(
                f"computer {self.computer_id} is not running: start it, then try again"
            )
        if self.agent.closed:
            async with self._dialing:
                if self.agent.closed and self.dial is not None:
                    self.agent = await AgentClient.dial(
                        self.dial, self.computer_id, timeout=timeout
                    )
                elif self.agent.closed:
                    self.agent = await AgentClient.connect(
                        str(self.vm.agent_socket), timeout=timeout
                    )
        return self.agent
