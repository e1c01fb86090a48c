"""What a built disk holds, by version (`templates/<id>.packages.json`), and what changed since
the template's last build, said in its build log: a moved Debian archive or a new release on PyPI
or npm shows as a difference, not as an unexplained failure."""

from __future__ import annotations

import json
from pathlib import Path

from ..host.door import AgentClient, summary
from .build_log import BuildLog

LIST_TIMEOUT = 600.0  # listing a disk's packages: seconds, however loaded the host
MAX_PACKAGE_LIST = 4 << 20  # bytes of the guest's package list kept
# What a built disk holds, by version (one process in the guest, stdlib only): Debian packages
# from dpkg's status, Python distributions of the system interpreter, global npm packages.
_PACKAGES = r"""
import glob, json
from importlib import metadata
out = {}
for entry in open("/var/lib/dpkg/status", errors="replace").read().split("\n\n"):
    f = dict(l.split(":", 1) for l in entry.splitlines() if l[:1] != " " and ":" in l)
    if f.get("Status", "").strip().endswith(" installed"):
        out["apt:" + f["Package"].strip()] = f.get("Version", "").strip()
for d in metadata.distributions():
    out["pip:" + (d.metadata["Name"] or "?")] = d.version
for p in glob.glob("/usr/*/lib/node_modules/*/package.json") + glob.glob(
    "/usr/*/lib/node_modules/@*/*/package.json"
) + glob.glob("/usr/lib/node_modules/*/package.json"):
    try:
        j = json.load(open(p))
        out["npm:" + j["name"]] = str(j.get("version", ""))
    except Exception:
        pass
print(json.dumps(out, sort_keys=True))
"""


async def record(client: AgentClient, packages: Path, blog: BuildLog) -> None:
    """Keep the built disk's packages with their versions (`templates/<id>.packages.json`)
    and say in the log what changed since the last build: a moved Debian archive or a new
    release on PyPI or npm shows as a difference, not as an unexplained failure."""
    if packages is None:
        return
    argv = ["python3", "-c", _PACKAGES]
    r = await client.exec(argv, timeout=LIST_TIMEOUT, max_output=MAX_PACKAGE_LIST)
    try:
        now = {str(k): str(v) for k, v in json.loads(r.stdout).items()}
    except (ValueError, AttributeError):
        blog.output("[sanbox] could not list the built disk's packages")
        return
    try:
        before = json.loads(packages.read_text())
    except (OSError, ValueError):
        before = None
    kinds = {k: sum(1 for n in now if n.startswith(k + ":")) for k in ("apt", "pip", "npm")}
    counts = ", ".join(f"{n} {k}" for k, n in kinds.items() if n)
    since = f"; since the last build: {summary(before, now)}" if isinstance(before, dict) else ""
    blog.output(f"[sanbox] packages: {counts}{since}")
    tmp = packages.with_suffix(".tmp")
    tmp.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
    tmp.replace(packages)
