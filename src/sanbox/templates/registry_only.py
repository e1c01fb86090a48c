"""Every package a fetch resolved comes from the registry: the check between a tool's resolution
and its download. Pure: the tool's own account of what it resolved in, `FetchError` out.

A step's own entries are registry names (`package_names`), but a package's DEPENDENCIES are
whatever its publisher wrote: npm follows `file:`, `link:`, `git+file:`, `git+ssh:` and tarball
URLs, pip follows `name @ file:///...` or an sdist's URL in a wheel's Requires-Dist (it refuses
them only under packages from PyPI's own file host). Followed on the host, as the fetch user,
they would copy a host file or clone a host repository into the bundle the tenant's guest gets.
So each fetcher resolves first (npm: a lockfile, `npm install --package-lock-only`; pip: `pip
install --dry-run --report`), this module refuses anything that is not the registry's, and only
then does the tool download exactly what was checked (npm: `npm install` of that lockfile,
checked unchanged; pip: `pip download --no-deps` of the pinned list).

pip builds a direct reference to read its metadata while it resolves, so for pip the report is
too late: `pip_guard` refuses the reference inside pip before it is fetched, and
`check_pip_output` turns that refusal into the same error; the report's check stays behind it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from .fetch_common import FetchError
from .pip_guard import REFUSED

_DEP_FIELDS = ("dependencies", "optionalDependencies", "peerDependencies", "devDependencies")
_WHAT_TO_DO = (
    "the host fetches registry packages only; use a version whose dependencies are all on "
    "the registry, or install it in a `run` step under the build's allowlist"
)


def registry_tarball(url: object, registries: frozenset[str]) -> bool:
    """Whether `url` is a package tarball on one of the registries: `http(s)://registry/.../-/
    name-1.2.3.tgz`, with no credentials in it."""
    if not isinstance(url, str):
        return False
    parts = urlsplit(url)
    host = (parts.hostname or "").lower().rstrip(".")
    return (
        parts.scheme in ("http", "https")
        and host in registries
        and parts.username is None
        and parts.password is None
        and "/-/" in parts.path
        and parts.path.endswith(".tgz")
    )


def _npm_name(path: str) -> str:
    """`node_modules/a/node_modules/@s/b` -> `@s/b`."""
    return path.rsplit("node_modules/", 1)[-1]


def _npm_parent(path: str) -> str:
    """The lockfile path of the package that depends on `path` ("" for the step's own)."""
    head = path.rsplit("node_modules/", 1)[0]
    return head[: -len("/")] if head.endswith("/") else head


def _npm_spec(packages: Mapping[str, Any], parent: str, name: str) -> str:
    """What the parent's package.json asked for `name` (the tenant-written spec)."""
    entry = packages.get(parent)
    if isinstance(entry, Mapping):
        for field in _DEP_FIELDS:
            deps = entry.get(field)
            if isinstance(deps, Mapping) and isinstance(deps.get(name), str):
                return str(deps[name])
    return ""


def check_npm_lock(lock: object, registries: frozenset[str]) -> int:
    """The number of packages in `lock` (a package-lock.json, v2 or v3), all of them registry
    tarballs (or bundled inside one); else `FetchError` naming the package, the dependency and
    where it would have come from."""
    packages = lock.get("packages") if isinstance(lock, Mapping) else None
    if not isinstance(packages, Mapping):
        raise FetchError("npm", "npm's resolution of the step is not a lockfile npm 7+ writes")
    count = 0
    # the installed places first: a link's target (a path outside node_modules) is named by the
    # link that points at it, with the dependency's spec
    order = sorted(packages.items(), key=lambda item: "node_modules/" not in str(item[0]))
    for path, entry in order:
        if path == "":
            continue  # the step itself
        if not isinstance(path, str) or not isinstance(entry, Mapping):
            raise FetchError("npm", "npm's resolution of the step is damaged")
        if entry.get("inBundle") is True and entry.get("link") is not True:
            count += 1  # inside its parent's registry tarball: no fetch of its own
            continue
        if entry.get("link") is not True and registry_tarball(entry.get("resolved"), registries):
            count += 1
            continue
        name, parent = _npm_name(path), _npm_parent(path)
        spec = _npm_spec(packages, parent, name) or str(entry.get("resolved") or "a local path")
        owner = _npm_name(parent) if parent else "the step"
        raise FetchError(
            "npm",
            f"npm package {owner!r} depends on {name!r} from {spec[:200]!r}, not from the "
            f"registry: {_WHAT_TO_DO}",
        )
    return count


def check_pip_report(report: object) -> list[str]:
    """`name==version` of every distribution in `report` (pip's installation report, as
    `pip install --dry-run --report` writes it), each one found on the package index; else
    `FetchError` naming the direct reference (`name @ URL`)."""
    items = report.get("install") if isinstance(report, Mapping) else None
    if not isinstance(items, list):
        raise FetchError("pip", "pip's resolution of the step is not an installation report")
    pinned = []
    for item in items:
        meta = item.get("metadata") if isinstance(item, Mapping) else None
        if not isinstance(meta, Mapping):
            raise FetchError("pip", "pip's resolution of the step is damaged")
        name, version = str(meta.get("name", "?")), str(meta.get("version", "?"))
        if item.get("is_direct") is not False:
            info = item.get("download_info")
            url = str(info.get("url", "")) if isinstance(info, Mapping) else ""
            raise FetchError(
                "pip",
                f"pip dependency {name!r} is a direct reference ({url[:200]!r}), not a "
                f"package on the index: {_WHAT_TO_DO}",
            )
        pinned.append(f"{name}=={version}")
    return pinned


def check_pip_output(output: str) -> None:
    """`FetchError` naming the package and its direct reference if `pip_guard` refused one in a
    pip run whose output is `output`; else nothing."""
    for line in output.splitlines():
        _, found, what = line.partition(REFUSED)
        if found:
            raise FetchError(
                "pip",
                f"pip package {what.strip()[:300]} as a direct reference, not a package on "
                f"the index: {_WHAT_TO_DO}",
            )
