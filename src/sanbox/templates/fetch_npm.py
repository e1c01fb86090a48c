"""npm steps: the host installs the packages into a staging prefix and tars it; the guest unpacks
it into /usr/local, offline, so the packages land in /usr/local/lib/node_modules and their
commands (npm's relative links in bin/) in /usr/local/bin.

The host runs `npm install --global --ignore-scripts`: install scripts are code from the
registry, and the host is the one place that must never run it (it is root, holds the secrets
and reaches the network). The cost: a package that builds a native addon or downloads a binary
in its install script is unpacked without that step; `npm rebuild` in a later `run` step (with
the build tools from an apt step) is the way to get it. The guest needs `node` (an apt step with
`nodejs` before this one); the install says so plainly when it is missing."""

from __future__ import annotations

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
    unknown_failure,
    write_script,
)
from .fetch_sandbox import FetchSandbox

ARCHIVE = "npm-prefix.tar.gz"
_NOT_FOUND = re.compile(
    r"The requested resource '([^']+)' could not be found|404 Not Found - GET \S+/(\S+)"
)


def npm_key(packages: Sequence[str]) -> str:
    """Same packages (in any order): same bundle."""
    return content_key("npm", {"packages": sorted(set(packages)), "platform": "linux-x64"})


def install_argv(prefix: Path, packages: Sequence[str]) -> list[str]:
    return [
        "npm",
        "install",
        "--global",
        "--prefix",
        str(prefix),
        "--ignore-scripts",
        "--no-audit",
        "--no-fund",
        "--no-update-notifier",
        "--loglevel=error",
        "--",
        *packages,
    ]


def failure_reason(packages: Sequence[str], output: str) -> str:
    """One line for a failed `npm install`: which package, and what to do."""
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


def pack(prefix: Path, archive: Path) -> None:
    """Tar the staging prefix's lib/ and bin/ (symlinks kept), owned by root."""

    def owned_by_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        return info

    with tarfile.open(archive, "w:gz") as tar:
        for top in ("lib", "bin"):
            if (prefix / top).exists():
                tar.add(prefix / top, arcname=top, filter=owned_by_root)


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


def fetch_npm(
    packages: Sequence[str],
    cache_dir: Path,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    timeout: float = DEFAULT_TIMEOUT,
) -> Bundle:
    """`packages` installed globally into a staging prefix, tarred for the guest's /usr/local."""
    names = check_names("npm", packages)
    key = npm_key(names)

    def build(files: Path, work: Path) -> None:
        require("npm", "npm")
        prefix = work / "prefix"
        registry = os.environ.get("npm_config_registry", "")  # noqa: SIM112 (npm's own name)
        with FetchSandbox.open([registry] if registry else []) as sandbox:
            sandbox.own(files, work)
            env = {
                **sandbox.env(work),
                "npm_config_cache": str(work / "npm-cache"),
                "npm_config_userconfig": str(empty_rc(work)),
                **({"npm_config_registry": registry} if registry else {}),
            }
            try:
                result = sandbox.run(
                    install_argv(prefix, names), work=work, timeout=timeout, env=env
                )
            finally:
                sandbox.reclaim(files, work)
        if result.returncode != 0:
            raise FetchError("npm", failure_reason(names, result.output))
        pack(prefix, files / ARCHIVE)
        write_script(files, install_script(names))

    return cached_bundle(cache_dir, "npm", key, build, max_bytes=max_bytes)
