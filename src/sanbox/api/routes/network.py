"""/v1/computers/{ref}/network and /ports: the egress allowlist (live), published ports and their
view links."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import urlencode

from fastapi import APIRouter, Request, Response

from ...control.errors import ConflictError, NotFoundError
from ...control.network import publication
from ..ports.access import VIEW_TOKEN_PARAM
from ..ports.view_link import LinkTarget
from ..published import view_link_signer
from ..schemas import (
    NetworkOut,
    NetworkPolicy,
    PortList,
    PortOut,
    PortPublish,
    ViewLinkOut,
    ViewLinkRequest,
)
from ._deps import Auth, Plane
from .computers import ERRORS

router = APIRouter(prefix="/v1/computers", tags=["network"], responses=ERRORS)


@router.get("/{ref}/network", response_model=NetworkOut)
async def get_network(ref: str, auth: Auth, plane: Plane) -> NetworkOut:
    return NetworkOut(allow=plane.get(auth.org, ref).allow)


@router.put("/{ref}/network", response_model=NetworkOut)
async def set_network(ref: str, body: NetworkPolicy, auth: Auth, plane: Plane) -> NetworkOut:
    """Replace the egress allowlist. It applies at once and closes flows it no longer allows."""
    row, closed = await plane.set_allow(auth.org, ref, body.allow)
    return NetworkOut(allow=row.allow, closed_flows=closed)


def _ports(request: Request, org: str, name: str, ports: list[dict[str, object]]) -> PortList:
    settings = request.app.state.settings
    return PortList(
        ports=[
            PortOut(
                port=int(str(p["port"])),
                public=bool(p["public"]),
                url=settings.port_url(int(str(p["port"])), name, org),
            )
            for p in ports
        ]
    )


@router.get("/{ref}/ports", response_model=PortList)
async def list_ports(ref: str, auth: Auth, plane: Plane, request: Request) -> PortList:
    row = plane.get(auth.org, ref)
    return _ports(request, auth.org.name, row.name, row.ports)


@router.post("/{ref}/ports", response_model=PortOut, status_code=201)
async def publish_port(
    ref: str, body: PortPublish, auth: Auth, plane: Plane, request: Request
) -> PortOut:
    """Publish a guest port as `http://PORT-NAME.ORG.localhost:7070/` (`PORT-NAME.localhost` in the
    default org); a key of the org is needed unless it is public. The answer has the URL."""
    row = plane.publish(auth.org, ref, body.port, body.public)
    ports = _ports(request, auth.org.name, row.name, row.ports).ports
    return next(p for p in ports if p.port == body.port)


@router.delete("/{ref}/ports/{port}", status_code=204)
async def unpublish_port(ref: str, port: int, auth: Auth, plane: Plane) -> Response:
    plane.unpublish(auth.org, ref, port)
    return Response(status_code=204)


@router.post("/{ref}/ports/{port}/view-link", response_model=ViewLinkOut)
async def view_link(
    ref: str,
    port: int,
    auth: Auth,
    plane: Plane,
    request: Request,
    body: ViewLinkRequest | None = None,
) -> ViewLinkOut:
    """A URL that opens this private port view-only for whoever holds it, until it expires (no
    API key in it). It stops working when the port is unpublished, the computer deleted, or this
    key revoked."""
    row = plane.get(auth.org, ref)
    published = [p for p in row.ports if p["port"] == port]
    if not published:
        raise NotFoundError(f"port {port} of {row.name} is not published", "port_not_found")
    if published[0]["public"]:
        raise ConflictError(
            f"port {port} of {row.name} is public: anyone may open it fully, so a view link "
            "would limit nothing; publish it private first",
            "port_public",
        )
    settings = request.app.state.settings
    signer = view_link_signer(settings.layout.secret_key)
    ttl = (body or ViewLinkRequest()).expires_in
    target = LinkTarget(row.id, row.org_id, port, publication(row, port))
    token, expires = signer.mint(target, auth.key.id, ttl)
    url = settings.port_url(port, row.name, auth.org.name)
    return ViewLinkOut(
        url=f"{url}?{urlencode({VIEW_TOKEN_PARAM: token})}",
        expires_at=datetime.fromtimestamp(expires, UTC),
    )
