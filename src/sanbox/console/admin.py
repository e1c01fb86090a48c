"""Admin pages, for admin keys only (the control plane refuses the others, as the API does): API
keys (create, shown once; revoke; expiry), the audit log with filters, orgs, and the host's
facts. A host-admin key sees every org; an admin key its own."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter, Request, Response

from ..api.admin_schemas import AuditRecordOut
from ..control.audit import AuditLog
from ..control.keys import Keys, require_admin
from .access import Plane, Reader, Writer
from .forms import number, text
from .render import ConsoleRoute, fragment, page

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)
AUDIT_SHOWN = 200


def _keys(request: Request) -> Keys:
    found: Keys = request.app.state.keys
    return found


@router.get("/admin")
async def admin_page(
    request: Request, v: Reader, plane: Plane, action: str = "", key: str = "", code: str = ""
) -> Response:
    require_admin(v.principal)
    keys = _keys(request)
    audit: AuditLog = request.app.state.audit
    found = audit.list(
        v.principal, None, None, AUDIT_SHOWN, action=action, key_prefix=key, code=code
    )
    records = [AuditRecordOut.of(r.row, r.org) for r in found]
    facts = asdict(await plane.host_facts())
    in_use = plane.find(v.org)
    use = {
        "computers": len(in_use),
        "running": sum(c.state == "running" for c in in_use),
        "vcpus": sum(c.vcpus for c in in_use if c.state == "running"),
        "memory_mib": sum(c.memory_mib for c in in_use if c.state == "running"),
    }
    return page(
        "admin.html",
        v,
        keys=keys.list_keys(v.principal),
        orgs=keys.list_orgs(v.principal),
        records=records[::-1],
        facts=facts,
        use=use,
        action=action,
        key=key,
        code=code,
    )


@router.post("/admin/keys")
async def create_key(request: Request, v: Writer) -> Response:
    form = await request.form()
    hours = number(form, "expires_hours")
    key, org, plaintext = _keys(request).create_key(
        v.principal,
        None,
        text(form, "name") or "",
        form.get("admin") == "on",
        expires_in=None if hours is None else hours * 3600,
    )
    return fragment("key_created.html", key=key, org=org.name, plaintext=plaintext)


@router.post("/admin/keys/{key_id}/revoke")
async def revoke_key(request: Request, key_id: str, v: Writer) -> Response:
    _keys(request).revoke(v.principal, key_id)
    return Response(status_code=204, headers={"HX-Refresh": "true"})
