"""`sanbox host serve`: run this machine's host agent for a fleet's control plane."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="This machine as a host of a fleet (docs/fleet.md).", no_args_is_help=True)


@app.command("serve")
def serve(
    listen: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port of the host's calls (HTTPS).")] = 7071,
    tunnel_port: Annotated[
        int | None,
        typer.Option(help="Port of the guest agents' tunnel (default: the next one after --port)."),
    ] = None,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Default $SANBOX_DATA_DIR or /var/lib/sanbox.")
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning, error.")] = "info",
    disk_overcommit: Annotated[
        float,
        typer.Option(
            envvar="SANBOX_DISK_OVERCOMMIT",
            help="Thin disks may add up to this times the data filesystem's free space (>= 1).",
        ),
    ] = 1.0,
    disk_low_watermark: Annotated[
        float | None,
        typer.Option(
            envvar="SANBOX_DISK_LOW_WATERMARK",
            help="Percent of the data filesystem an overcommitting host keeps free of new disks "
            "(default 10).",
        ),
    ] = None,
) -> None:
    """Serve this host's computers to the fleet's control plane over mutual TLS: its
    certificate, key and the control CA's certificate in <data dir>/host/fleet/."""
    from ..fleet.link.agent import HostAgent
    from ..fleet.link.host_egress import HostEgress
    from ..fleet.link.pki import host_identity
    from ..fleet.link.room import HostRoom
    from ..fleet.link.serve import serve as run
    from ..host.data.layout import DataDir
    from ..host.egress.budget import raise_open_file_limit
    from ..host.runtime import HostRuntime
    from ..host.settings import HostSettings

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    raise_open_file_limit()  # as the server's: its egress budget is fitted to it
    settings = HostSettings.from_env()
    if data_dir is not None:
        settings = dataclasses.replace(settings, data_dir=data_dir)
    layout = DataDir(settings.data_dir, settings.ram_dir)
    runtime = HostRuntime(layout, settings=settings)
    me = host_identity(runtime.data_dir.host / "fleet")
    missing = [p for p in (me.cert, me.key, me.peer_ca) if not p.is_file()]
    if missing:
        raise typer.BadParameter(
            f"{', '.join(map(str, missing))} missing: this host has not joined a fleet"
        )
    if not disk_overcommit >= 1.0:
        raise typer.BadParameter("--disk-overcommit is 1 (no overcommit) or more")
    if disk_low_watermark is not None and not 0 <= disk_low_watermark < 100:
        raise typer.BadParameter("--disk-low-watermark is a percentage, 0 or more and under 100")
    network = runtime.network
    egress = HostEgress.of(network, settings) if network is not None else None
    room = HostRoom(runtime, disk_overcommit, disk_low_watermark)
    agent = HostAgent(runtime, room=room, egress=egress)
    tunnel = port + 1 if tunnel_port is None else tunnel_port  # where the control plane dials it
    asyncio.run(run(agent, listen, port, tunnel, me))


@app.command("token")
def token(
    region: Annotated[str, typer.Option(help="The region the host joins.")],
    ttl: Annotated[str, typer.Option(help="How long it is good for: 15m, 1h, 2d.")] = "1h",
    host: Annotated[
        str | None,
        typer.Option(help="For this host only: the one way to join again as a known host."),
    ] = None,
) -> None:
    """Make a one-time join token for a new host, or for one host (host-admin key); shown once."""
    from . import config, fleet_views
    from ._output import fail
    from .grammars import parse_duration

    try:
        seconds = parse_duration(ttl)
    except ValueError as exc:
        fail("invalid_ttl", str(exc))
    with config.reported(), config.client() as client:
        fleet_views.token(client.fleet.join_token(region, float(seconds), host))


def clear_join(server: str) -> str | None:
    """Why `sanbox host join` refuses `server`, or None: the join sends its one-time token and
    takes back the control CA this host will trust, so over plain http anyone on the path could
    take the token or hand the host a CA of their own. Plain http only to this machine (a
    single-machine fleet, the tests): 127.0.0.0/8, ::1, localhost."""
    import ipaddress
    from urllib.parse import urlsplit

    parts = urlsplit(server)
    if parts.scheme == "https" and parts.hostname:
        return None
    if parts.scheme != "http" or not parts.hostname:
        return f"--server {server} is not an https:// URL"
    host = parts.hostname.rstrip(".")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if loopback:
        return None
    return (
        f"--server {server} would send the join token and the control CA in clear: "
        f"use https://{parts.netloc}"
    )


@app.command("join")
def join(
    server: Annotated[str, typer.Option(help="The control plane's URL.")],
    token: Annotated[str, typer.Option(help="A join token (`sanbox host token`).")],
    name: Annotated[str, typer.Option(help="This host's name in the fleet.")],
    region: Annotated[str, typer.Option(help="This host's region.")],
    address: Annotated[
        list[str], typer.Option(help="Where the control plane reaches this host (repeat).")
    ],
    port: Annotated[int, typer.Option(help="The port `sanbox host serve` listens on.")] = 7071,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Default $SANBOX_DATA_DIR or /var/lib/sanbox.")
    ] = None,
) -> None:
    """Join a fleet: a key made here (it never leaves this host), its certificate signed by the
    control plane's host CA for the token, written to <data dir>/host/fleet/. The key is kept
    for the token until the answer came: run again with the same token after an answer was lost
    (a dropped link, a timeout), it asks with the same key and gets the same answer."""
    from ._output import fail

    refused = clear_join(server)
    if refused is not None:
        fail("insecure_server", refused)

    import hashlib

    import httpx
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization

    from .. import pki
    from ..fleet.link.pki import host_identity
    from ..host.data.layout import DataDir
    from ..host.data.space import disk_room
    from ..host.runtime import HostRuntime
    from ..host.settings import HostSettings
    from ._output import console

    settings = HostSettings.from_env()
    if data_dir is not None:
        settings = dataclasses.replace(settings, data_dir=data_dir)
    layout = DataDir(settings.data_dir, settings.ram_dir)
    layout.ensure()
    runtime = HostRuntime(layout, settings=settings)
    hypervisor, isolation = runtime.driver_facts()
    me = host_identity(layout.host / "fleet")
    me.cert.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    pending = me.cert.parent / f"joining-{hashlib.sha256(token.encode()).hexdigest()[:16]}.key"
    if pending.exists():  # an earlier run with this token whose answer never came
        key = pki.load_key(pending)
    else:
        key = pki.new_key()
        pki.write_key(pending, key)
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(pki.name(f"sanbox host {name}"))
        .sign(key, hashes.SHA256())
    )
    ram, _ = runtime.room(disk=False)
    body = {
        "token": token,
        "name": name,
        "region": region,
        "addresses": address,
        "port": port,
        "csr": csr.public_bytes(serialization.Encoding.PEM).decode(),
        "capacity": {
            "vcpus": os.cpu_count() or 1,
            "memory_mib": max(1, ram.spare // (1 << 20)),
            "disk_bytes": max(0, disk_room(layout).spare),
            "vm_overhead_mib": -(-ram.overhead // (1 << 20)),  # its reports say it from then on
        },
        "hypervisor": hypervisor,
        "accel": isolation.rpartition("-")[2] if "-" in isolation else "unknown",
    }
    try:
        r = httpx.post(f"{server.rstrip('/')}/v1/fleet/join", json=body, timeout=30)
    except httpx.HTTPError as exc:
        fail(
            "server_unreachable",
            f"cannot reach {server}: {exc}; run this again with the same token "
            "(it asks with the same key, and a join that was made is answered again)",
        )
    if r.status_code != 201:
        if r.status_code in (400, 422):  # a bad request: no join took the token with this key
            pending.unlink(missing_ok=True)
        # kept otherwise: a token refused as used may be this key's join still being made (an
        # earlier run's, slow), and a proxy's 4xx or 5xx may stand for an answer it lost
        json_body = r.headers.get("content-type", "").startswith("application/json")
        error = r.json().get("error", {}) if json_body else {}
        fail(error.get("code", "join_refused"), f"join refused: {error.get('message', r.text)}")
    joined = r.json()
    pki.write_key(me.key, key)
    me.cert.write_text(joined["certificate"])
    me.peer_ca.write_text(joined["control_ca"])
    pending.unlink(missing_ok=True)
    console.print(
        f"joined as {name} ({joined['host_id']}, epoch {joined['epoch']}) in {region}: "
        "`sanbox host serve` serves it"
    )


@app.command("ls")
def ls() -> None:
    """The fleet's hosts: state, lease, capacity and what placements hold (host-admin key)."""
    from . import config, fleet_views

    with config.reported(), config.client() as client:
        hosts = client.fleet.hosts()
    fleet_views.hosts(hosts)


@app.command("jobs")
def jobs() -> None:
    """The control plane's singleton jobs and the API node that runs each (host-admin key)."""
    from . import config, fleet_views

    with config.reported(), config.client() as client:
        held = client.fleet.jobs()
    fleet_views.jobs(held)


@app.command("get")
def get(name: Annotated[str, typer.Argument(help="The host's name")]) -> None:
    """One host: its state, epoch, lease, capacity and reservations (host-admin key)."""
    from . import config, fleet_views

    with config.reported(), config.client() as client:
        h = client.fleet.get(name)
    fleet_views.host(h)


@app.command("drain")
def drain(
    name: Annotated[str, typer.Argument(help="The host's name")],
    undo: Annotated[bool, typer.Option("--undo", help="Place on it again")] = False,
) -> None:
    """Place nothing new on a host; its computers stay and run (`--undo` to place on it again)."""
    from . import config, fleet_views

    with config.reported(), config.client() as client:
        h = client.fleet.drain(name, not undo)
    fleet_views.drained(h)


@app.command("forget")
def forget(
    name: Annotated[str, typer.Argument(help="The host's name")],
    confirm_dead: Annotated[
        bool, typer.Option("--confirm-dead", help="You know it is dead and will not come back")
    ] = False,
) -> None:
    """Retire a lost host on your word that it is dead; lists the computers it held (their
    disks were on it: delete them, or make them anew from a snapshot)."""
    from . import config, fleet_views
    from ._output import fail

    if not confirm_dead:
        fail(
            "confirmation_required",
            f"forgetting host {name} drops its computers' disks from the fleet: "
            "say --confirm-dead if it is dead",
        )
    with config.reported(), config.client() as client:
        held = client.fleet.forget(name, confirm_dead=True)
    fleet_views.forgotten(name, held)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="host")
