"""Running a host agent: its calls over HTTPS (uvicorn) and its agent tunnel, both requiring a
client certificate the fleet's control CA signed (pki.py), until cancelled."""

from __future__ import annotations

import asyncio
import contextlib
import ssl

import uvicorn

from ...host.machines import console
from .agent import HostAgent
from .pki import Identity, server_tls


async def serve(
    agent: HostAgent,
    host: str,
    port: int,
    tunnel_port: int,
    me: Identity,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve until the process is stopped (or `stop` is set)."""
    await agent.runtime.drop_exports()  # a move a dead caller began: nothing streams them now
    tunnel = await agent.serve_tunnel(host, tunnel_port, server_tls(me))
    config = uvicorn.Config(
        agent.app(),
        host=host,
        port=port,
        ssl_certfile=str(me.cert),
        ssl_keyfile=str(me.key),
        ssl_ca_certs=str(me.peer_ca),
        ssl_cert_reqs=ssl.CERT_REQUIRED,
        log_level="warning",
        lifespan="off",
    )
    server = uvicorn.Server(config)
    tasks = [asyncio.ensure_future(console.keep_bounded(agent.runtime.data_dir))]
    if stop is not None:
        tasks.append(asyncio.ensure_future(_exit_on(stop, server)))
    try:
        await server.serve()
    finally:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        tunnel.close()
        await tunnel.wait_closed()
        if agent.egress is not None:  # its computers' proxies and the secrets held for them
            await agent.egress.close()


async def _exit_on(stop: asyncio.Event, server: uvicorn.Server) -> None:
    await stop.wait()
    server.should_exit = True
