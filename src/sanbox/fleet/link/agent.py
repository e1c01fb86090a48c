"""The host agent (`sanbox host serve`): this machine's one door (`HostRuntime`) served to the
fleet's control plane over HTTPS with mutual TLS, and each computer's guest agent reached
through it.

- `POST /v1/host/calls/{name}`: one call of the door (calls.py), by computer id and values
  (wire.py), with an operation id (`Sanbox-Operation`): the journal answers a repeated id with
  the first answer.
- `GET /v1/host/report`: what this host is and holds now (driver, capabilities, room, image
  builds, snapshots, each computer's VM liveness and CPU time, saved memory); the control plane
  reads it every few seconds, which is also how it knows the host is there.
- The agent tunnel, a TLS port of its own: after the handshake the caller names a computer in
  one line, and its streams are carried to that computer's guest agent over the one shared
  connection to it (mux.py).
- A moving disk's or snapshot's bytes, out and in (carry_routes.py).

Only a client whose certificate the fleet's control CA signed gets past the handshake (uvicorn
and the tunnel both require one); the host's own certificate is signed by the host CA, so a
host cannot act as the control plane nor the control plane as a host.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import secrets
import ssl
from functools import partial
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ...host.agent import AgentClient, AgentError
from ...host.agent.dial import unix_dial
from ...host.door import HostError, Liveness, Machine, is_current
from ...host.runtime import HostRuntime
from . import carry_routes, wire
from .calls import CALLS
from .carry_routes import refusal
from .host_egress import HostEgress
from .journal import Answer, Journal
from .mux import GuestMuxes
from .room import HostRoom

log = logging.getLogger(__name__)

OPERATION = "Sanbox-Operation"
MAX_BODY = 1 << 20  # a call's arguments are small values
_OP_ID = re.compile(r"[A-Za-z0-9_.:-]{8,128}")
ATTACH_WAIT = 10.0  # seconds for a re-attached VM's agent to answer
TUNNEL_LINE = 256  # the computer id line that opens a tunnel


class HostAgent:
    def __init__(
        self,
        runtime: HostRuntime,
        journal: Journal | None = None,
        room: HostRoom | None = None,
        egress: HostEgress | None = None,
    ) -> None:
        self.runtime = runtime
        self.journal = journal or Journal()
        self.room = room or HostRoom(runtime)  # its own admission (room.py)
        self.egress = egress  # its computers' egress gateway (host_egress.py); None: none here
        self.epoch = secrets.token_hex(8)  # this process: a restarted agent is a new epoch
        self.machines: dict[str, Machine] = {}  # the VMs it started or re-attached
        self.muxes = GuestMuxes()  # the one connection to each guest agent, shared (mux.py)

    async def machine(self, computer_id: str) -> Machine:
        """The running machine of a computer: held, or re-attached (after a restart), its agent
        reached through the computer's shared connection."""
        held = self.machines.get(computer_id)
        if held is not None and held.vm.alive():
            return held
        vm = self.runtime.attach_vm(computer_id)
        if vm is None:
            raise HostError(f"computer {computer_id} has no running VM on this host")
        dial = self.muxes.dial(computer_id, unix_dial(str(vm.agent_socket)))
        agent = await AgentClient.dial(dial, computer_id, timeout=ATTACH_WAIT)
        machine = Machine(computer_id, self.runtime.data_dir.computer(computer_id), vm, agent, dial)
        self.machines[computer_id] = machine
        return machine

    async def hand_over(self, machine: Machine) -> Machine:
        """Keep a machine made here (a create, start, resume, copy), its own agent connection
        closed: from now on every stream to its agent, this process's and the API nodes'
        through the tunnel, goes over the one shared connection (mux.py)."""
        with contextlib.suppress(AgentError):
            await machine.agent.close()
        computer_id = machine.computer_id
        await self.muxes.forget(computer_id)  # whatever was left of a VM before this one
        machine.dial = self.muxes.dial(computer_id, unix_dial(str(machine.vm.agent_socket)))
        self.machines[computer_id] = machine
        return machine

    async def ended(self, computer_id: str) -> None:
        """A computer's VM ended here (stopped, killed, destroyed, set aside)."""
        self.machines.pop(computer_id, None)
        await self.muxes.forget(computer_id)

    def report(self) -> dict[str, Any]:
        rt = self.runtime
        hypervisor, isolation = rt.driver_facts()
        storage, reflink = rt.storage()
        ram, disk = rt.room()
        builds = rt.builds()
        computers: dict[str, Any] = {}
        for computer_id in rt.data_dir.computer_ids():
            vm = rt.attach_vm(computer_id)
            computers[computer_id] = {
                "liveness": (vm.liveness() if vm is not None else Liveness.DEAD).value,
                "isolation": vm.isolation if vm is not None else None,
                "cpu_usec": rt.cpu_usec(computer_id),
                "saved_memory": rt.has_saved_memory(computer_id),
                "carried": None,  # the egress gateway's: filled in on the event loop
            }
        return {
            "epoch": self.epoch,
            "cpus": os.cpu_count() or 1,
            "hypervisor": hypervisor,
            "isolation": isolation,
            "capabilities": wire.plain(rt.capabilities()),
            "confinement": rt.confinement(),
            "storage": storage,
            "reflink": reflink,
            "room": {"ram": wire.room_out(ram), "disk": wire.room_out(disk)},
            "disk_overcommit": self.room.capacity.disk_overcommit,
            "disk_kept_free": self.room.kept_free(),
            "builds": [wire.image_out(i) for i in builds],
            "current": [i.build_id for i in builds if is_current(i)],
            "snapshots": rt.snapshot_ids(),
            "computers": computers,
            "egress": None,
        }

    def app(self) -> Starlette:
        async def call(request: Request) -> JSONResponse:
            name = request.path_params["name"]
            handler = CALLS.get(name)
            if handler is None:
                return refusal(404, "unknown_call", f"no host call {name!r}")
            op_id = request.headers.get(OPERATION, "")
            if not _OP_ID.fullmatch(op_id):
                said = f"{OPERATION}: 8-128 of [A-Za-z0-9_.:-]"
                return refusal(400, "invalid_operation", said)
            body = await request.body()
            if len(body) > MAX_BODY:
                return refusal(413, "too_large", "a call's arguments are at most 1 MiB")
            try:
                args = json.loads(body or b"{}")
            except ValueError:
                return refusal(400, "invalid_json", "the body is not JSON")
            if not isinstance(args, dict):
                return refusal(400, "invalid_json", "the body is a JSON object")

            async def run() -> Answer:
                try:
                    return 200, {"value": await handler(self.runtime, self, args)}
                except (HostError, OSError) as exc:
                    log.warning("%s failed: %s", name, exc)
                    return 409, {"error": wire.error_out(exc)}
                except (KeyError, TypeError, ValueError) as exc:
                    return 400, {
                        "error": {
                            "type": "HostError",
                            "code": "invalid_call",
                            "message": f"{name}: bad arguments: {exc}",
                        }
                    }

            (status, answer), _ran = await self.journal.once(f"{name}/{op_id}", run)
            return JSONResponse(answer, status)

        async def report(_request: Request) -> JSONResponse:
            found = await asyncio.to_thread(self.report)
            if self.egress is not None:  # read on the loop, which owns the gateway's tables
                found["egress"] = egress = self.egress.report()
                for computer_id, seen in found["computers"].items():
                    seen["carried"] = egress["computers"].get(computer_id, {}).get("carried")
            return JSONResponse(found)

        return Starlette(
            routes=[
                Route("/v1/host/calls/{name}", call, methods=["POST"]),
                Route("/v1/host/report", report, methods=["GET"]),
                Route("/v1/host/exports/{item_id}/{name}", partial(carry_routes.export, self)),
                Route(
                    "/v1/host/imports/{kind}/{item_id}",
                    partial(carry_routes.take, self),
                    methods=["PUT"],
                ),
            ]
        )

    # the agent tunnel ---------------------------------------------------------------------

    async def serve_tunnel(self, host: str, port: int, tls: ssl.SSLContext) -> asyncio.Server:
        return await asyncio.start_server(self._tunnel, host, port, ssl=tls)

    async def _tunnel(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10):
                line = await reader.readline()
            computer_id = line[:TUNNEL_LINE].decode("ascii", "replace").strip()
            if len(line) > TUNNEL_LINE or not wire.COMPUTER_ID.fullmatch(computer_id):
                raise ValueError("not a computer id")
            vm = self.runtime.attach_vm(computer_id)
            if vm is None:
                raise LookupError(f"{computer_id} has no running VM here")
        except (TimeoutError, ValueError, LookupError, OSError) as exc:
            log.info("tunnel refused: %s", exc)
            writer.close()
            return
        dial = unix_dial(str(vm.agent_socket))
        await self.muxes.serve(computer_id, dial, reader, writer)
