"""Running a host agent: its calls over HTTPS (uvicorn) and its agent tunnel, both requiring a
client certificate the fleet's control CA signed (pki.py), until cancelled. A certificate that a
join since replaced (`sanbox host join` again: the control plane takes only the newest) is taken
by both within `RELOAD_EVERY`, for the connections made from then on, without a restart."""

from __future__ import annotations

import asyncio
import logging
import ssl

import uvicorn

from ...host.machines import console
from ...tasks import cancel_and_wait
from .agent import HostAgent
from .pki import Identity, server_tls

log = logging.getLogger(__name__)
RELOAD_EVERY = 5.0  # seconds between looks at the certificate's file


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
    tunnel_tls = server_tls(me)
    tunnel = await agent.serve_tunnel(host, tunnel_port, tunnel_tls)
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
    config.load()  # its TLS context made here, to be given a new certificate later
    assert config.ssl is not None
    server = uvicorn.Server(config)
    tasks = [
        asyncio.ensure_future(console.keep_bounded(agent.runtime.data_dir)),
        asyncio.ensure_future(_reload_on_join(me, [config.ssl, tunnel_tls])),
    ]
    if stop is not None:
        tasks.append(asyncio.ensure_future(_exit_on(stop, server)))
    try:
        await server.serve()
    finally:
        for task in tasks:
            await cancel_and_wait(task)
        tunnel.close()
        await tunnel.wait_closed()
        if agent.egress is not None:  # its computers' proxies and the secrets held for them
            await agent.egress.close()


async def _exit_on(stop: asyncio.Event, server: uvicorn.Server) -> None:
    await stop.wait()
    server.should_exit = True


def _stamp(me: Identity) -> tuple[int, int] | None:
    try:
        found = me.cert.stat()
    except OSError:
        return None
    return found.st_mtime_ns, found.st_size


async def _reload_on_join(me: Identity, contexts: list[ssl.SSLContext]) -> None:
    """Give `contexts` the host's certificate and key again whenever its file changes (a join
    writes the key, then the certificate: a pair caught half written is taken at the next
    look)."""
    taken = _stamp(me)
    while True:
        await asyncio.sleep(RELOAD_EVERY)
        now = _stamp(me)
        if now is None or now == taken:
            continue
        try:
            for context in contexts:
                context.load_cert_chain(str(me.cert), str(me.key))
        except (OSError, ssl.SSLError) as exc:
            log.warning("the host's new certificate could not be taken yet: %s", exc)
            continue
        taken = now
        log.warning("took the host's new certificate (it joined again)")
