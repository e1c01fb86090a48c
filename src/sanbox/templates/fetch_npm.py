"""npm steps: the host installs the packages into a staging project and tars it in npm's global
layout; the guest unpacks it into /usr/local, offline, so the packages land in
/usr/local/lib/node_modules and their commands (npm's relative links in bin/) in /usr/local/bin.

Two runs of npm, with the check between them (`registry_only`): `npm install --package-lock-only`
resolves the step into a lockfile without fetching a package, every entry of it must be a
registry tarball (a dependency on `file:`, `link:`, git or another URL is refused, naming it),
and `npm install` then installs exactly that lockfile (checked unchanged after it). Both use
the `shallow` strategy: each package of the step at the top with its own dependencies under it,
as `npm install --global` lays them out. npm is given no git (`git` set to a program that does
not exist).

Both run with `--ignore-scripts`: install scripts are code from the registry, and the host is
the one place that must never run it (it is root, holds the secrets and reaches the network).
The cost: a package that builds a native addon or downloads a binary in its install script is
unpacked without that step; `npm rebuild` in a later `run` step (with the build tools from an apt
step) is the way to get it. The guest needs `node` (an apt step with `nodejs` before this one);
the install says so plainly when it is missing."""

from __future__ import annotations

import json
import os
import re
import tarfile
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote

from .fetch_common import (
    DEFAULT_MAX_BYTES,
    DEFAULT_TIMEOUT,
    Bundle,
    FetchError,
    cached_bundle,
    check_names,
    content_key,
    quote_all,
    require,
    staging_bound,
    unknown_failure,
    write_script,
)
from .fetch_policy import registries
from .fetch_sandbox import FetchSandbox
from .registry_only import check_npm_lock

ARCHIVE = "npm-prefix.tar.gz"
DEFAULT_REGISTRY = "https://registry.npmjs.org/"
NO_GIT = "/nonexistent/sanbox-no-git"  # npm's `git`: a git dependency fails to resolve
LOCK = "package-lock.json"
_NOT_FOUND = re.compile(
    r"The requested resource '([^']+)' could not be found|404 Not Found - GET \S+/(\S+)"
)


def npm_key(packages: Sequence[str]) -> str:
    """Same packages (in any order): same bundle."""
    return content_key("npm", {"packages": sorted(set(packages)), "platform": "linux-x64"})


_COMMON = (
    "--ignore-scripts",
    "--install-strategy=shallow",
    "--no-audit",
    "--no-fund",
    "--no-update-notifier",
    "--loglevel=error",
)


def resolve_argv(project: Path, packages: Sequence[str]) -> list[str]:
    """A lockfile for `packages` in `project`; nothing but metadata is fetched."""
    return [
        "npm",
        "install",
        "--prefix",
        str(project),
        "--package-lock-only",
        *_COMMON,
        "--",
        *packages,
    ]


def install_argv(project: Path) -> list[str]:
    """What the lockfile in `project` says, into its node_modules: `npm install` with no
    package, which installs the lockfile as it is (`npm ci` refuses one that `--package-lock-only`
    wrote without other platforms' optional dependencies, as npm 11 does); the caller checks the
    lockfile is unchanged after it (`_unchanged`), so nothing was resolved anew."""
    return ["npm", "install", "--prefix", str(project), *_COMMON]


def failure_reason(packages: Sequence[str], output: str) -> str:
    """One line for a failed `npm install`: which package, and what to do."""
    if NO_GIT in output:
        return (
            f"a dependency of {' '.join(packages)[:200]} is a git repository: the host fetches "
            "registry packages only; install it in a `run` step under the build's allowlist"
        )
    if m := _NOT_FOUND.search(output):
        what = m.group(1) or unquote(m.group(2))
        return (
            f"no npm package {what!r}: check the name with `npm view NAME` or remove it "
            "from the step"
        )
    for line in output.splitlines():
        if "ETARGET" in line or "No matching version" in line:
            return (
                f"no version of {' '.join(packages)[:200]} matches: pick one that "
                "`npm view NAME versions` lists"
            )
    return unknown_failure("npm", packages, output)


def _owned_by_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def bin_link(target: str) -> str | None:
    """Where /usr/local/bin/NAME points for a link npm made in node_modules/.bin (`../pkg/cli.js`
    -> `../lib/node_modules/pkg/cli.js`), or None for one that leaves node_modules."""
    parts = target.split("/")
    if len(parts) < 3 or parts[0] != ".." or any(p in ("", ".", "..") for p in parts[1:]):
        return None
    return "../lib/node_modules/" + "/".join(parts[1:])


def pack(modules: Path, archive: Path) -> None:
    """Tar the project's node_modules in npm's global layout (lib/node_modules/PKG, bin/NAME
    links), owned by root; npm's own bookkeeping (.bin, .package-lock.json) stays out."""
    with tarfile.open(archive, "w:gz") as tar:
        for top in sorted(modules.iterdir()) if modules.is_dir() else []:
            if top.name not in (".bin", ".package-lock.json"):
                tar.add(top, arcname=f"lib/node_modules/{top.name}", filter=_owned_by_root)
        for link in sorted((modules / ".bin").iterdir()) if (modules / ".bin").is_dir() else []:
            target = bin_link(os.readlink(link)) if link.is_symlink() else None
            if target is None:
                continue
            info = _owned_by_root(tarfile.TarInfo(f"bin/{link.name}"))
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
            tar.addfile(info)


def install_script(packages: Sequence[str]) -> str:
    return f"""#!/bin/sh
# sanbox npm bundle: unpacks {quote_all(packages)} into /usr/local, offline
set -eu
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v node >/dev/null 2>&1; then
  echo "sanbox: npm step needs node in the guest: add an apt step with nodejs before it" >&2
  exit 127
fi
mkdir -p /usr/local/lib/node_modules /usr/local/bin
tar -xzf "$here/{ARCHIVE}" -C /usr/local --no-same-owner
"""


def empty_rc(work: Path) -> Path:
    """An empty user config for npm: the server's own user settings (tokens, say) stay its own;
    the host's global config (`{prefix}/etc/npmrc`: the operator's CA file, a mirror) applies."""
    rc = work / "user.npmrc"
    rc.write_text("")
    return rc


def _read_lock(project: Path) -> bytes:
    try:
        return (project / LOCK).read_bytes()
    except OSError:
        raise FetchError("npm", "npm did not resolve the step into a lockfile; try again") from None


def _parsed(lock: bytes) -> object:
    try:
        return json.loads(lock)
    except ValueError:
        raise FetchError("npm", "npm did not resolve the step into a lockfile; try again") from None


def _unchanged(project: Path, checked: bytes) -> None:
    """The lockfile as it was checked: an install that resolved anew (and so fetched what was
    never checked) is refused, its packages not packed."""
    if _read_lock(project) != checked:
        raise FetchError("npm", "npm resolved the step anew while installing it; try again")


def fetch_npm(
    packages: Sequence[str],
    cache_dir: Path,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    keep_free: int = 0,
    timeout: float = DEFAULT_TIMEOUT,
    org: str = "",
) -> Bundle:
    """`packages` resolved, checked to come from the registry alone, installed into a staging
    project, and tarred for the guest's /usr/local."""
    names = check_names("npm", packages)
    key = npm_key(names)

    def build(files: Path, work: Path) -> None:
        require("npm", "npm")
        project = work / "project"
        project.mkdir()
        (project / "package.json").write_text('{"private": true}\n')
        (work / "tmp").mkdir()
        bound = staging_bound("npm", work, max_bytes, keep_free)
        registry = os.environ.get("npm_config_registry", "")  # noqa: SIM112 (npm's own name)
        with FetchSandbox.open([registry] if registry else []) as sandbox:
            env = {
                **sandbox.env(work),
                "npm_config_cache": str(work / "npm-cache"),
                "npm_config_userconfig": str(empty_rc(work)),
                "npm_config_git": NO_GIT,
                "TMPDIR": str(work / "tmp"),  # what npm unpacks: in the bounded folder
                **({"npm_config_registry": registry} if registry else {}),
            }
            sandbox.own(files, work)
            try:
                result = sandbox.run(
                    resolve_argv(project, names), work=work, timeout=timeout, env=env, bound=bound
                )
            finally:
                sandbox.reclaim(files, work)
            if result.returncode != 0:
                raise FetchError("npm", failure_reason(names, result.output))
            checked = _read_lock(project)
            check_npm_lock(_parsed(checked), registries(os.environ, [registry or DEFAULT_REGISTRY]))
            sandbox.own(files, work)
            try:
                result = sandbox.run(
                    install_argv(project), work=work, timeout=timeout, env=env, bound=bound
                )
            finally:
                sandbox.reclaim(files, work)
        if result.returncode != 0:
            raise FetchError("npm", failure_reason(names, result.output))
        _unchanged(project, checked)
        pack(project / "node_modules", files / ARCHIVE)
        write_script(files, install_script(names))

    return cached_bundle(
        cache_dir, "npm", key, build, max_bytes=max_bytes, keep_free=keep_free, org=org
    )
