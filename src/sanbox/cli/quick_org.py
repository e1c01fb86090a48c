"""The commands on the org's things without the typer app (sanbox.cli.quick says how, and holds
the table of commands): `template ls|get|rm|prune`, `pool ls|set`, `secret ls|get|set|rm|bind|
unbind|bindings` (`set`'s value read as the typer command reads it: sanbox.cli.secret_values),
`org ls|create|quota|regions`, `key ls|create|revoke`, `usage` (and `--csv`), `audit`,
`image ls|prune`. Each makes the requests the SDK makes for its typer command, in the same order,
and prints through the same functions (sanbox.cli.org_views, sanbox.cli.views). Each loads the
records it reads (sanbox.sdk.records), not the SDK's client.
"""

from __future__ import annotations

from ..sdk.errors import SecretNotFoundError, TemplateNotFoundError
from . import org_views, views
from ._output import fail, show_record
from .argv import Args
from .calls import LONG, Api, path
from .grammars import parse_duration, parse_limit
from .secret_values import NOT_ON_STDIN, stdin_value

# -- templates and pools --------------------------------------------------------------------------


def template_ls(a: Args) -> None:
    from ..sdk.records.template import Template

    data = Api().json("GET", "/v1/templates")
    org_views.templates([Template.from_json(t) for t in data.get("templates", [])], a.flag("json"))


def template_get(a: Args) -> None:
    from ..sdk.records.template import Template

    data = Api().json("GET", path("templates", a["template"]), params={"region": a.value("region")})
    show_record(Template.from_json(data).to_json(), a.flag("json"))


def template_rm(a: Args) -> None:
    from ..sdk.records.template import Template

    api = Api()
    for name in a.rest:
        try:
            where = path("templates", name)
            Template.from_json(api.json("DELETE", where, params={"region": a.value("region")}))
        except TemplateNotFoundError:
            if not a.flag("force"):
                raise
            continue
        org_views.template_deleted(name)


def template_prune(a: Args) -> None:
    from ..sdk.records.template import BuildCachePruned

    data = Api().json("POST", "/v1/build-cache/prune", timeout=LONG)
    org_views.cache_pruned(BuildCachePruned.from_json(data), a.flag("json"))


def pool_ls(a: Args) -> None:
    from ..sdk.records.template import Pool

    data = Api().json("GET", "/v1/pools")
    org_views.pools([Pool.from_json(p) for p in data.get("pools", [])], a.flag("json"))


def pool_set(a: Args) -> None:
    from ..sdk.records.template import Pool

    body = {"size": a.numbers["size"]}
    data = Api().json("PUT", path("pools", a["template"]), body=body)
    org_views.pool_set(Pool.from_json(data), a.flag("json"))


# -- secrets --------------------------------------------------------------------------------------


def secret_ls(a: Args) -> None:
    from ..sdk.records.secret import Secret

    data = Api().json("GET", "/v1/secrets")
    org_views.secrets([Secret.from_json(s) for s in data.get("secrets", [])], a.flag("json"))


def secret_get(a: Args) -> None:
    from ..sdk.records.secret import Secret

    found = Secret.from_json(Api().json("GET", path("secrets", a["name"])))
    show_record(found.to_json(), a.flag("json"))


def secret_set(a: Args) -> None:
    from ..sdk.records.secret import Secret

    if not a.flag("value_stdin"):
        fail("invalid_argument", NOT_ON_STDIN)
    body = {
        "value": stdin_value(),
        "hosts": a.all("host"),
        "header": a.value("header"),
        "placeholder_only": a.flag("placeholder"),
    }
    saved = Secret.from_json(Api().json("PUT", path("secrets", a["name"]), body=body))
    org_views.secret_saved(saved, a.flag("json"))


def secret_rm(a: Args) -> None:
    from ..sdk.records.secret import Secret

    api = Api()
    for name in a.rest:
        try:
            Secret.from_json(api.json("DELETE", path("secrets", name)))
        except SecretNotFoundError:
            if not a.flag("force"):
                raise
            continue
        org_views.secret_deleted(name)


def secret_bind(a: Args) -> None:
    from ..sdk.records.secret import SecretBinding

    where = path("computers", a["computer"], "secrets", a["name"])
    data = Api().json("PUT", where, body={"env": a.value("env")})
    org_views.bound(SecretBinding.from_json(data), a.flag("json"))


def secret_unbind(a: Args) -> None:
    from ..sdk.records.secret import SecretBinding

    data = Api().json("DELETE", path("computers", a["computer"], "secrets", a["name"]))
    org_views.unbound(SecretBinding.from_json(data))


def secret_bindings(a: Args) -> None:
    from ..sdk.records.secret import SecretBinding

    data = Api().json("GET", path("computers", a["computer"], "secrets"))
    found = [SecretBinding.from_json(b) for b in data.get("bindings", [])]
    org_views.bindings(found, a.flag("json"))


# -- orgs and keys --------------------------------------------------------------------------------


def org_ls(a: Args) -> None:
    from ..sdk.records.org import Org

    data = Api().json("GET", "/v1/orgs")
    org_views.orgs([Org.from_json(o) for o in data.get("orgs", [])], a.flag("json"))


def org_create(a: Args) -> None:
    from ..sdk.records.org import Org

    data = Api().json("POST", "/v1/orgs", body={"name": a["name"]})
    org_views.org_created(Org.from_json(data))


def org_quota(a: Args) -> None:
    """The quota; with options, set: each limit not given kept as the server said it."""
    from ..sdk.records.org import Quota

    wanted = {name: parse_limit(a.value(name)) for name in org_views.QUOTAS}
    api = Api()
    where = path("orgs", a["org"], "quota")
    found = Quota.from_json(api.json("GET", where))
    if any(value != "" for value in wanted.values()):
        body = {k: (found.limits.get(k) if v == "" else v) for k, v in wanted.items()}
        found = Quota.from_json(api.json("PUT", where, body=body))
    org_views.quota(found, a.flag("json"))


def org_regions(a: Args) -> None:
    """Where the org's computers run; with options, set: what is not given kept as it is."""
    from ..sdk.records.org import OrgRegions

    home, allow = a.value("home"), a.all("allow") or None
    api = Api()
    where = path("orgs", a["org"], "regions")
    now = OrgRegions.from_json(api.json("GET", where))
    if home is not None or allow is not None:
        new_home = now.home if home is None else (None if home == "none" else home)
        allowed = now.allowed if allow is None else [r for r in allow if r != "none"]
        body = {"home": new_home, "allowed": list(allowed or [])}
        now = OrgRegions.from_json(api.json("PUT", where, body=body))
    org_views.regions(now)


def key_ls(a: Args) -> None:
    from ..sdk.records.org import ApiKey

    data = Api().json("GET", "/v1/keys", params={"org": a.value("org")})
    views.keys([ApiKey.from_json(k) for k in data.get("keys", [])], a.flag("json"))


def key_create(a: Args) -> None:
    from ..sdk.records.org import ApiKey

    expires_in = a.value("expires_in")
    body = {
        "org": a.value("org"),
        "name": a.value("name"),
        "admin": a.flag("admin"),
        "host_admin": a.flag("host_admin"),
        "expires_in": None if expires_in is None else parse_duration(expires_in),
        "expires_at": a.value("expires_at"),
    }
    sent = {k: v for k, v in body.items() if v is not None}
    key = ApiKey.from_json(Api().json("POST", "/v1/keys", body=sent))
    views.key_created(key, a.flag("json"))


def key_revoke(a: Args) -> None:
    from ..sdk.records.org import ApiKey

    views.key_revoked(ApiKey.from_json(Api().json("DELETE", path("keys", a["key_id"]))))


# -- usage, the audit log, image builds -----------------------------------------------------------


def usage(a: Args) -> None:
    from ..sdk.usage import UsageReport

    by = a.value("by") or "computer"
    params = {"from": a.value("from"), "to": a.value("to"), "group_by": by, "org": a.value("org")}
    if a.flag("csv"):  # the server's CSV, printed as typer.echo prints it
        _, body = Api().request("GET", "/v1/usage", params={**params, "format": "csv"})
        org_views.echoed(body.decode())
        return
    found = UsageReport.from_json(Api().json("GET", "/v1/usage", params=params))
    org_views.usage(found, by, a.flag("json"))


def audit(a: Args) -> None:
    from ..sdk.records.org import AuditRecord

    limit = a.number("limit")
    params = {"after": a.number("after"), "limit": 50 if limit is None else limit}
    data = Api().json("GET", "/v1/audit", params={**params, "org": a.value("org")})
    org_views.audit([AuditRecord.from_json(r) for r in data.get("records", [])], a.flag("json"))


def image_ls(a: Args) -> None:
    from ..sdk.records.host import ImageBuild

    data = Api().json("GET", "/v1/images")
    org_views.images([ImageBuild.from_json(i) for i in data.get("images", [])], a.flag("json"))


def image_prune(a: Args) -> None:
    from ..sdk.records.host import ImageBuild

    data = Api().json("POST", "/v1/images/prune")
    org_views.images_pruned([ImageBuild.from_json(i) for i in data.get("removed", [])])
