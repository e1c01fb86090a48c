"""/v1/computers/{ref}/network and /ports: the egress allowlist (live) and published ports."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from ..schemas import NetworkOut, NetworkPolicy, PortList, PortOut, PortPublish
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
    return PortList(ports=[
        PortOut(port=int(str(p["port"])), public=bool(p["public"]),
                url=settings.port_url(int(str(p["port"])), name, org))
        for p in ports
    ])  # fmt: skip


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
