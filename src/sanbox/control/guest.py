"""Calls into a computer's guest: agent errors become control errors with stable codes, and a dead
channel on a dead VM records the computer as stopped."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from ..host.agent import (
    AgentError,
    AgentTimeoutError,
    AgentUnavailableError,
    ConnectionRefusedInGuestError,
    FileNotFoundInGuestError,
    InvalidPathError,
    RemoteError,
)
from ..host.runtime import Machine
from ..host.vmm import VmNotRunningError
from ..store.models import Org
from .errors import (
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    OperationTimeoutError,
    UnavailableError,
)
from .service import ComputerService


@contextlib.asynccontextmanager
async def guest_call(service: ComputerService, org: Org, ref: str) -> AsyncIterator[Machine]:
    """The running machine for `ref`, with agent errors translated on the way out."""
    machine = await service.machine(org, ref)
    async with service.activity(machine.computer_id):
        try:
            yield machine
        except InvalidPathError as exc:
            raise InvalidRequestError(exc.message, "invalid_path") from exc
        except FileNotFoundInGuestError as exc:
            raise NotFoundError(exc.message, "not_found") from exc
        except ConnectionRefusedInGuestError as exc:
            raise ConflictError(exc.message, "connection_refused") from exc
        except RemoteError as exc:
            raise InvalidRequestError(exc.message, exc.code) from exc
        except AgentTimeoutError as exc:
            raise OperationTimeoutError(f"the guest did not answer in time: {exc}") from exc
        except (AgentUnavailableError, VmNotRunningError, AgentError) as exc:
            if not machine.vm.alive():
                await service.vm_exited(machine.computer_id, "its VM process exited")
                raise ConflictError(
                    f"computer {machine.computer_id} stopped while in use: start it again",
                    "computer_not_running",
                ) from exc
            raise UnavailableError(f"the guest agent is unavailable: {exc}") from exc
