"""pip steps: the host downloads wheels for the guest's python3; the guest installs them offline.

The guest (Debian 12) has CPython 3.11 and no pip, so the bundle carries a pip wheel too and
runs pip from it: `python3 pip-X.whl/pip install --no-index --find-links wheels ...`.

Only wheels are fetched (`--only-binary=:all:`): the guest has no compiler and no network, so a
package with no wheel for CPython 3.11 on glibc x86_64 is refused on the host with that reason.

pip resolves first (`pip install --dry-run --report`, nothing installed); then `pip download
--no-deps` fetches exactly the pinned list the report gave, from the index. A dependency that is a
direct reference (`name @ file:///...`, an sdist's or a VCS URL in a wheel's Requires-Dist, which
pip follows from any index but PyPI's own file host, and builds while it resolves) is refused
inside pip before it is fetched (every pip command runs under `pip_guard`), naming it
(`registry_only`); the report is checked for one too.

Debian marks its python3 EXTERNALLY-MANAGED. The install passes `--break-system-packages`:
Debian's python3 installs a non-venv pip's files under /usr/local/lib/python3.11/dist-packages
(its `posix_local` scheme), so dpkg's files in /usr/lib/python3 are never overwritten, and the
packages are importable by the plain `python3` that services and `sanbox exec` run. A venv
would keep them away from that `python3`; `--prefix /usr/local` would install into
site-packages, which Debian's python3 does not read.

A step with `venv = "/opt/x"` installs into that virtual environment instead (made with
`python3 -m venv --without-pip` if it is not there; pip still runs from the bundle's wheel): for
an application whose pinned dependencies should not meet the system's, run as /opt/x/bin/NAME."""

from __future__ import annotations

import json
import logging
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from .fetch_common import (
    DEFAULT_MAX_BYTES,
    DEFAULT_TIMEOUT,
    Bundle,
    FetchError,
    ToolResult,
    cached_bundle,
    check_names,
    content_key,
    quote_all,
    staging_bound,
    unknown_failure,
    write_script,
)
from .fetch_sandbox import FetchSandbox
from .pip_guard import UNGUARDED
from .pip_guard import argv as guarded_pip
from .registry_only import check_pip_output, check_pip_report

log = logging.getLogger(__name__)

PYTHON = "3.11"
ABI = "cp311"
GLIBC_MINOR = 36  # Debian 12's glibc 2.36: manylinux_2_17 .. manylinux_2_36 wheels run there
ARCH = "x86_64"
REPORT = "report.json"


def platforms(glibc_minor: int = GLIBC_MINOR, arch: str = ARCH) -> list[str]:
    """Every platform tag a wheel may carry to run on the guest, newest first (pip does not
    expand `manylinux_2_36` to the older ones itself)."""
    tags = [f"manylinux_2_{minor}_{arch}" for minor in range(glibc_minor, 4, -1)]
    return [*tags, f"manylinux2014_{arch}", f"manylinux2010_{arch}", f"manylinux1_{arch}"]


def normal_requirement(text: str) -> str:
    """One spelling of a requirement (checked by `package_names`): the name and extras as PEP 503
    normalises them, the specifiers sorted, no spaces. `Torch`, `torch` and `TORCH` are one."""
    req = Requirement(text)
    extras = ",".join(sorted(canonicalize_name(e) for e in req.extras))
    marker = f"; {req.marker}" if req.marker is not None else ""
    return f"{canonicalize_name(req.name)}{f'[{extras}]' if extras else ''}{req.specifier}{marker}"


def pip_key(requirements: Sequence[str], venv: str = "") -> str:
    """Same requirements (in any order or spelling) for the same interpreter, platform and venv:
    same bundle."""
    inputs = {
        "requirements": sorted({normal_requirement(r) for r in requirements}),
        "python": PYTHON,
        "abi": ABI,
        "platforms": platforms(),
    }
    return content_key("pip", {**inputs, "venv": venv} if venv else inputs)


# `pip download`, quiet and never asking
PIP_DOWNLOAD = ("download", "--disable-pip-version-check", "--no-input", "--progress-bar", "off")


def _target() -> list[str]:
    """The guest's interpreter and platforms, as pip's options."""
    target = [
        "--only-binary=:all:",
        "--python-version",
        PYTHON,
        "--implementation",
        "cp",
        "--abi",
        ABI,
        "--abi",
        "abi3",
        "--abi",
        "none",
    ]
    for tag in platforms():
        target += ["--platform", tag]
    return target


def resolve_argv(python: str, requirements: Sequence[str], work: Path) -> list[str]:
    """pip's resolution of `requirements` for the guest, as a report in `work`; nothing is
    installed (`--target` only because pip takes platform options with it alone)."""
    return [
        *guarded_pip(python),
        "install",
        "--disable-pip-version-check",
        "--no-input",
        "--progress-bar",
        "off",
        "--dry-run",
        "--ignore-installed",
        "--report",
        str(work / REPORT),
        "--target",
        str(work / "target"),
        *_target(),
        "--",
        *requirements,
    ]


def download_argv(python: str, pinned: Sequence[str], dest: Path) -> list[str]:
    """Exactly the pinned distributions, from the index, none of their dependencies."""
    pip = guarded_pip(python)
    return [*pip, *PIP_DOWNLOAD, "--no-deps", "--dest", str(dest), *_target(), "--", *pinned]


def pip_wheel_argv(python: str, dest: Path) -> list[str]:
    pip = guarded_pip(python)
    return [*pip, *PIP_DOWNLOAD, "--no-deps", "--only-binary=:all:", "--dest", str(dest), "pip"]


def check_guarded(result: ToolResult) -> None:
    """`FetchError` if `pip_guard` refused a direct reference in this pip run (naming it) or
    could not guard this host's pip (why: the server's log)."""
    if result.returncode == 0:
        return
    check_pip_output(result.output)
    for line in result.output.splitlines():
        if line.startswith(UNGUARDED):
            log.error("pip fetch refused: %s; install a pip it knows in the server's venv", line)
            raise FetchError(
                "host",
                "this host's pip cannot be run safely for a fetch (an operator can see why "
                "in the server's log)",
            )


def failure_reason(requirements: Sequence[str], output: str) -> str:
    """One line for a failed `pip download`: which requirement, and what to do."""
    for line in output.splitlines():
        if "No matching distribution found for" in line:
            what = line.split("No matching distribution found for", 1)[1].strip()
            return (
                f"no wheel of {what!r} for CPython {PYTHON} on Linux {ARCH}: check the "
                "name and version on PyPI; a package with no wheel cannot be built in the "
                "guest offline (use a version that has wheels, or a `run` step)"
            )
    return unknown_failure("pip", requirements, output)


def index_urls(env: Mapping[str, str]) -> list[str]:
    """The package indexes the host's pip is set to use (their hosts join the registries)."""
    urls = [env.get("PIP_INDEX_URL", ""), *env.get("PIP_EXTRA_INDEX_URL", "").split()]
    return [u for u in urls if u]


def _make_venv(venv: str) -> str:
    """The script's lines that make the venv if it is not there yet (none without a venv)."""
    if not venv:
        return ""
    return f"""venv={shlex.quote(venv)}
if [ ! -x "$venv/bin/python3" ] && ! python3 -m venv --without-pip "$venv"; then
  echo "sanbox: could not make the venv $venv (an apt step with python3-venv first?)" >&2
  exit 1
fi
"""


def install_script(requirements: Sequence[str], pip_wheel: str, venv: str = "") -> str:
    python, system = (
        ('"$venv/bin/python3"', "") if venv else ("python3", "--break-system-packages ")
    )
    return f"""#!/bin/sh
# sanbox pip bundle: installs {quote_all(requirements)} from the wheels beside this script, offline
set -eu
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v python3 >/dev/null 2>&1; then
  echo "sanbox: pip step needs python3 in the guest" >&2; exit 127
fi
if ! python3 -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  echo "sanbox: pip step fetched wheels for CPython {PYTHON}, the guest has $(python3 -V)" >&2
  exit 1
fi
{_make_venv(venv)}exec {python} "$here/pip/{pip_wheel}/pip" install --no-index \\
  --find-links "$here/wheels" \\
  {system}--root-user-action=ignore --disable-pip-version-check \\
  --no-warn-script-location -- {quote_all(requirements)}
"""


def _read_report(work: Path) -> object:
    try:
        return json.loads((work / REPORT).read_text())
    except (OSError, ValueError):
        raise FetchError("pip", "pip did not resolve the step into a report; try again") from None


def fetch_pip(
    requirements: Sequence[str],
    cache_dir: Path,
    *,
    python: str = sys.executable,
    max_bytes: int = DEFAULT_MAX_BYTES,
    keep_free: int = 0,
    timeout: float = DEFAULT_TIMEOUT,
    org: str = "",
    venv: str = "",
) -> Bundle:
    """Wheels for `requirements` (and their dependencies) plus a pip wheel to install them
    (into `venv` if one is named, else for the system python3)."""
    names = check_names("pip", requirements)
    key = pip_key(names, venv)

    def build(files: Path, work: Path) -> None:
        (files / "wheels").mkdir()
        (files / "pip").mkdir()
        (work / "tmp").mkdir()
        bound = staging_bound("pip", work, max_bytes, keep_free)
        with FetchSandbox.open(index_urls(os.environ)) as sandbox:
            env = {**sandbox.env(work), "TMPDIR": str(work / "tmp")}  # pip's unpacking: bounded

            def run(argv: list[str]) -> ToolResult:
                result = sandbox.run(argv, work=work, timeout=timeout, env=env, bound=bound)
                check_guarded(result)
                return result

            sandbox.own(files, work)
            try:
                result = run(resolve_argv(python, names, work))
            finally:
                sandbox.reclaim(files, work)
            if result.returncode != 0:
                raise FetchError("pip", failure_reason(names, result.output))
            pinned = check_pip_report(_read_report(work))
            sandbox.own(files, work)
            try:
                if pinned:
                    result = run(download_argv(python, pinned, files / "wheels"))
                    if result.returncode != 0:
                        raise FetchError("pip", failure_reason(names, result.output))
                result = run(pip_wheel_argv(python, files / "pip"))
            finally:
                sandbox.reclaim(files, work)
        wheels = sorted((files / "pip").glob("pip-*.whl"))
        if result.returncode != 0 or not wheels:
            raise FetchError("pip", unknown_failure("pip", ["pip"], result.output))
        write_script(files, install_script(names, wheels[-1].name, venv))

    return cached_bundle(
        cache_dir, "pip", key, build, max_bytes=max_bytes, keep_free=keep_free, org=org
    )
