"""What the commands on the org's things print: templates, pools, secrets and their bindings, orgs
with their quotas and regions, usage, the audit log, image builds. As sanbox.cli.views: one
function per kind of output, called by the typer command and by the same command run without
typer (sanbox.cli.quick_org), so both print exactly the same."""

from __future__ import annotations

import re
import sys
from dataclasses import asdict
from typing import TYPE_CHECKING

from rich.markup import escape

from ._output import console, mib, plain
from .views import new_table, print_json, said

if TYPE_CHECKING:
    from ..sdk.types import (
        AuditRecord,
        BuildCachePruned,
        ImageBuild,
        Org,
        OrgRegions,
        Pool,
        Quota,
        Secret,
        SecretBinding,
        Template,
    )
    from ..sdk.usage import UsageReport, UsageTotals


# -- templates and pools --------------------------------------------------------------------------


def templates(found: list[Template], as_json: bool) -> None:
    """`sanbox template ls`."""
    if as_json:
        print_json([t.to_json() for t in found])
        return
    regions = any(t.region for t in found)  # a fleet's: a template is built per region
    heads = ["NAME", *(["REGION"] if regions else []), "STATE", "BASE", "CPUS", "MEMORY"]
    table = new_table(*heads, "READY SNAPSHOT", "BUILT", box=None)
    for t in found:
        table.add_row(
            t.name,
            *([t.region or "-"] if regions else []),
            "built in" if t.builtin else t.state,
            t.base or "-",
            str(t.vcpus),
            f"{t.memory_mib} MiB",
            "yes" if t.ready_snapshot else "-",
            t.updated_at or "",
        )
    console.print(table)


def template_deleted(name: str) -> None:
    """`sanbox template rm`, for each one deleted."""
    console.print(f"deleted template {name}")


def cache_pruned(pruned: BuildCachePruned, as_json: bool) -> None:
    """`sanbox template prune`."""
    if as_json:
        print_json(asdict(pruned))
        return
    console.print(
        f"removed {pruned.removed_steps} cached build step(s), "
        f"{mib(pruned.freed_bytes)} freed; {pruned.kept_steps} kept: "
        "the org's templates stand on them"
    )


def pools(found: list[Pool], as_json: bool) -> None:
    """`sanbox pool ls`."""
    if as_json:
        print_json([p.to_json() for p in found])
        return
    table = new_table("TEMPLATE", "SIZE", "READY", "STARTING", "UNAVAILABLE", "REFILL", box=None)
    for p in found:
        counts = (p.size, p.ready, p.starting, p.unavailable)
        table.add_row(p.template, *map(str, counts), p.refill)
    console.print(table)


def pool_set(pool: Pool, as_json: bool) -> None:
    """`sanbox pool set`."""
    if as_json:
        print_json(pool.to_json())
        return
    said(f"pool [bold]{pool.template}[/]: size {pool.size}, {pool.ready} ready, {pool.refill}")


# -- secrets --------------------------------------------------------------------------------------


def secret_saved(secret: Secret, as_json: bool) -> None:
    """`sanbox secret set` (what the API says of it: never its value)."""
    if as_json:
        print_json(secret.to_json())
        return
    rule = (
        f"placeholder only, in {secret.header or 'Authorization'}"
        if secret.placeholder_only
        else (secret.header or "Authorization: Bearer …")
    )
    what = escape(f"{', '.join(secret.hosts)}; {rule}")
    said(f"secret [bold]{escape(secret.name)}[/] version {secret.version}: {what}")


def secrets(found: list[Secret], as_json: bool) -> None:
    """`sanbox secret ls` (what the API says of them: never a value)."""
    if as_json:
        print_json([s.to_json() for s in found])
        return
    table = new_table("NAME", "HOSTS", "INJECTS", "VERSION", "UPDATED", box=None)
    for s in found:
        injects = "placeholder only" if s.placeholder_only else (s.header or "-")
        row = (s.name, ", ".join(s.hosts), injects, str(s.version), s.updated_at or "")
        table.add_row(*map(plain, row))
    console.print(table)


def secret_deleted(name: str) -> None:
    """`sanbox secret rm`, for each one deleted."""
    said(escape(f"deleted secret {name}"))


def _binding(b: SecretBinding) -> str:
    where = f"${b.env}" if b.env else "no variable (use the placeholder yourself)"
    return escape(f"{b.secret} on {b.computer}: {where} = {b.placeholder}")


def bound(binding: SecretBinding, as_json: bool) -> None:
    """`sanbox secret bind`."""
    if as_json:
        print_json(binding.to_json())
        return
    said(f"bound {_binding(binding)}")


def unbound(binding: SecretBinding) -> None:
    """`sanbox secret unbind`."""
    said(escape(f"unbound {binding.secret} from {binding.computer}"))


def bindings(found: list[SecretBinding], as_json: bool) -> None:
    """`sanbox secret bindings`."""
    if as_json:
        print_json([b.to_json() for b in found])
        return
    table = new_table("SECRET", "ENV", "PLACEHOLDER", "BOUND", box=None)
    for b in found:
        table.add_row(*map(plain, (b.secret, b.env or "-", b.placeholder, b.created_at or "")))
    console.print(table)


# -- orgs, usage, the audit log -------------------------------------------------------------------


def orgs(found: list[Org], as_json: bool) -> None:
    """`sanbox org ls`."""
    if as_json:
        print_json([asdict(o) for o in found])
        return
    table = new_table("NAME", "ID", "CREATED", box=None)
    for org in found:
        table.add_row(org.name, org.id, org.created_at or "")
    console.print(table)


def org_created(org: Org) -> None:
    """`sanbox org create`."""
    said(f"created org {org.name} ({org.id})")


QUOTAS = {  # field -> (option, what, unit)
    "running": ("--running", "running computers", ""),
    "vcpus": ("--vcpus", "running vCPUs", ""),
    "memory_mib": ("--memory", "running memory", " MiB"),
    "disk_gib": ("--disk", "disk allocated", " GiB"),
    "snapshots": ("--snapshots", "snapshots", ""),
}


def quota(found: Quota, as_json: bool) -> None:
    """`sanbox org quota`: each limit and what the org uses of it."""
    if as_json:
        print_json(asdict(found))
        return
    table = new_table("QUOTA", "LIMIT", "USED", box=None)
    for name, (flag, what, unit) in QUOTAS.items():
        limit = found.limits.get(name)
        shown = "none" if limit is None else f"{limit}{unit}"
        table.add_row(f"{what} ({flag})", shown, f"{found.use.get(name, 0)}{unit}")
    said(f"org {found.org}")
    console.print(table)


def regions(now: OrgRegions) -> None:
    """`sanbox org regions`."""
    others = ", ".join(now.allowed) or "none"
    said(f"org {now.org}: home {now.home or 'none (anywhere)'}; also {others}")


def _usage_cells(u: UsageTotals) -> list[str]:
    cpu = "unmeasured" if u.cpu_seconds is None else f"{u.cpu_seconds:.1f}"
    egress = "-" if u.egress_bytes is None else str(u.egress_bytes)
    return [
        f"{u.running_seconds / 3600:.3f}",
        f"{u.paused_seconds / 3600:.3f}",
        f"{u.vcpu_seconds / 3600:.3f}",
        f"{u.memory_gib_seconds / 3600:.3f}",
        cpu,
        f"{u.disk_gib_hours:.3f}",
        f"{u.snapshot_gib_hours:.3f}",
        egress,
    ]


_ESCAPES = re.compile(r"\033\[[;?0-9]*[a-zA-Z]")  # what click's `strip_ansi` takes out


def echoed(text: str) -> None:
    """Text as the server sent it (`usage --csv`), as `typer.echo(text, nl=False)` printed it:
    without terminal escapes off a terminal."""
    if not sys.stdout.isatty():
        text = _ESCAPES.sub("", text)
    sys.stdout.write(text)
    sys.stdout.flush()


def usage(found: UsageReport, by: str, as_json: bool) -> None:
    """`sanbox usage` (not `--csv`: the server's CSV is printed as it comes)."""
    if as_json:
        print_json(asdict(found))
        return
    first = {"computer": "COMPUTER", "template": "TEMPLATE", "day": "DAY"}.get(by, by.upper())
    table = new_table(
        first,
        "RUNNING H",
        "PAUSED H",
        "VCPU-H",
        "MEM GIB-H",
        "CPU S",
        "DISK GIB-H",
        "SNAP GIB-H",
        "EGRESS B",
        box=None,
        title=f"{found.org}: {found.start} to {found.end}",
    )
    for g in found.groups:
        label = f"{g.name} ({g.key})" if g.name else g.key
        table.add_row(label, *_usage_cells(g.usage))
    table.add_row("[bold]total[/bold]", *_usage_cells(found.total))
    console.print(table)


def outcome(record: AuditRecord) -> str:
    """How an audited request ended: its status, and its error's code if it failed."""
    return f"{record.status} {record.code}" if record.code else str(record.status)


def audit(records: list[AuditRecord], as_json: bool) -> None:
    """`sanbox audit`."""
    if as_json:
        print_json([r.to_json() for r in records])
        return
    heads = ("ID", "TIME", "ACTOR", "ORG", "ACTION", "TARGET", "OUTCOME", "CLIENT")
    table = new_table(*heads, box=None)
    for r in records:  # an action, a target, a code: a request's path, sent by anyone
        row = (
            str(r.id),
            (r.time or "")[:19].replace("T", " "),
            f"{r.key_prefix}…" if r.key_prefix else "-",
            r.org or "-",
            r.action,
            " ".join(f"{k}={v}" for k, v in r.target.items()) or "-",
            outcome(r),
            r.client or "-",
        )
        table.add_row(*map(plain, row))
    console.print(table)


# -- image builds ---------------------------------------------------------------------------------


def images(builds: list[ImageBuild], as_json: bool) -> None:
    """`sanbox image ls`."""
    if as_json:
        print_json([asdict(b) for b in builds])
        return
    table = new_table(
        "TEMPLATE", "BUILD", "KERNEL", "CURRENT", "COMPUTERS", "SIZE", "PRUNE", box=None
    )
    for b in builds:
        table.add_row(
            b.template,
            b.build_id,
            b.kernel_release,
            "yes" if b.current else "",
            str(b.computers),
            mib(b.bytes),
            "" if b.needed else "yes",
        )
    console.print(table)


def images_pruned(removed: list[ImageBuild]) -> None:
    """`sanbox image prune`: each build removed, then the sum."""
    for b in removed:
        said(f"removed {b.template} build {b.build_id} ({mib(b.bytes)})")
    freed = sum(b.bytes for b in removed)
    said(f"{len(removed)} build(s) removed, {mib(freed)} freed")
