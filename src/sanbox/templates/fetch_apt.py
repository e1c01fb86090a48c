"""apt steps: the host downloads the .debs a guest lacks; the guest installs them offline.

The host's apt-get resolves the packages against the GUEST's installed set (a copy of its
/var/lib/dpkg/status as `Dir::State::status`), with private lists, state and archives folders, so
nothing of the host's own apt state is read or changed. The package lists come from an
`apt-get update` with the image's sources (recipe.py), kept per day under
`cache_dir/apt/lists/`. In the guest, `apt-get install ./debs/*.deb` installs them with apt's
ordering, against no sources and empty lists: nothing can be wanted from elsewhere, so it is
offline by construction (`--no-download` is not used: it makes apt refuse local .debs)."""

from __future__ import annotations

import datetime
import hashlib
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ..host.image.recipe import recipe_for
from .fetch_common import (
    DEFAULT_MAX_BYTES,
    DEFAULT_TIMEOUT,
    Bundle,
    FetchError,
    cached_bundle,
    check_names,
    content_key,
    locked,
    output_tail,
    quote_all,
    require,
    staging_bound,
    unknown_failure,
    write_script,
)
from .fetch_sandbox import FetchSandbox

log = logging.getLogger(__name__)

KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
ARCH = "amd64"
LISTS_KEPT_DAYS = 3
MAX_STATUS_BYTES = 32 * 1024 * 1024  # a guest's dpkg status file (Debian 12 base: ~1 MiB)

_MISSING = (
    re.compile(r"E: Unable to locate package (\S+)"),
    re.compile(r"E: Package '([^']+)' has no installation candidate"),
    re.compile(r"E: Version '[^']+' for '([^']+)' was not found"),
    re.compile(r"E: Couldn't find any package by (?:glob|regex) '([^']+)'"),
)


def apt_key(
    packages: Sequence[str], dpkg_status: bytes, sources: Sequence[str], archive: str = ""
) -> str:
    """Same packages (in any order), same guest status, same suites, same archive state (the
    digest of the lists' Release files: a moved archive gives a new bundle): same bundle.
    Mirrors are left out: where a package comes from does not change what it is."""
    suites = sorted(" ".join(line.split()[2:]) for line in sources)
    inputs = {
        "packages": sorted(set(packages)),
        "arch": ARCH,
        "suites": suites,
        "status": hashlib.sha256(dpkg_status).hexdigest(),
    }
    return content_key("apt", {**inputs, "archive": archive} if archive else inputs)


def archive_digest(lists: Path) -> str:
    """sha256 of the Release files in `lists`: what the archive was when they were fetched."""
    digest = hashlib.sha256()
    for path in sorted(lists.glob("*Release")):
        if path.is_file() and not path.is_symlink():
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def source_list(sources: Sequence[str], keyring: Path | None) -> str:
    """The private sources.list: the image's lines, signed by the Debian keyring if present."""
    out = []
    for line in sources:
        kind, rest = line.split(maxsplit=1)
        out.append(f"{kind} [signed-by={keyring}] {rest}" if keyring else line)
    return "\n".join(out) + "\n"


def apt_options(*, etc: Path, lists: Path, state: Path, cache: Path, status: Path) -> list[str]:
    """`-o` options that point apt at private folders: the host's lists, status, pins and
    archives are neither read nor written (its apt.conf.d, e.g. a proxy, still applies)."""
    options = {
        "APT::Architecture": ARCH,
        "APT::Architectures": ARCH,
        "Dir::Etc::SourceList": str(etc / "sources.list"),
        "Dir::Etc::SourceParts": str(etc / "sources.list.d"),
        "Dir::Etc::Preferences": str(etc / "preferences"),
        "Dir::Etc::PreferencesParts": str(etc / "preferences.d"),
        "Dir::State": str(state),
        "Dir::State::Lists": str(lists),
        "Dir::State::status": str(status),
        "Dir::Cache": str(cache),
        "Dir::Cache::archives": str(cache / "archives"),
        "Dir::Cache::pkgcache": "",
        "Dir::Cache::srcpkgcache": "",
        "APT::Install-Recommends": "false",
    }
    return [arg for name, value in options.items() for arg in ("-o", f"{name}={value}")]


def download_argv(packages: Sequence[str], options: Sequence[str]) -> list[str]:
    return [
        "apt-get",
        *options,
        "-q",
        "-y",
        "--download-only",
        "--no-install-recommends",
        "install",
        "--",
        *packages,
    ]


def missing_packages(output: str) -> list[str]:
    """The packages apt said it cannot find, in the order it said so."""
    found: list[str] = []
    for pattern in _MISSING:
        for name in pattern.findall(output):
            if name not in found:
                found.append(name)
    return found


def install_script(packages: Sequence[str], debs: Sequence[str]) -> str:
    """The guest's offline install of the bundle. dpkg skips its fsync per unpacked file
    (`--force-unsafe-io`: minutes of a large step in an emulated guest): a build step's files are
    made durable once, by the `sync` and the filesystem freeze before its layer is taken, and a
    build computer that dies mid-step is thrown away."""
    words = quote_all(packages)
    if not debs:
        return f'#!/bin/sh\necho "sanbox: apt: already installed: {words}"\n'
    return f"""#!/bin/sh
# sanbox apt bundle: installs {words} from the .debs beside this script, offline
set -eu
here=$(cd "$(dirname "$0")" && pwd)
export DEBIAN_FRONTEND=noninteractive
mkdir -p "$here/lists/partial" "$here/parts"
exec apt-get install -y -q --no-install-recommends \\
  -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$here/parts" \\
  -o Dir::State::Lists="$here/lists" -o Dpkg::Options::=--force-confold \\
  -o Dpkg::Options::=--force-unsafe-io \\
  "$here"/debs/*.deb
"""


def _chmod_tree_dirs(top: Path, stop: Path) -> None:
    """Let apt's unprivileged downloader (_apt) reach the private folders we made."""
    path = top
    while path != stop and stop in path.parents:
        os.chmod(path, 0o755)
        path = path.parent


def _prepare(root: Path, sources: Sequence[str], status: bytes) -> dict[str, Path]:
    dirs = {name: root / name for name in ("etc", "state", "cache")}
    for sub in ("etc/sources.list.d", "etc/preferences.d", "state", "cache/archives/partial"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    keyring = KEYRING if KEYRING.exists() else None
    (dirs["etc"] / "sources.list").write_text(source_list(sources, keyring))
    dirs["status"] = root / "status"
    dirs["status"].write_bytes(status)
    return dirs


def _lists(cache_dir: Path, sources: Sequence[str], today: datetime.date, timeout: float) -> Path:
    """Package lists for `sources`, fetched once a day; older days are removed."""
    base = cache_dir / "apt" / "lists"
    tag = hashlib.sha256("\n".join(sources).encode()).hexdigest()[:16]
    final = base / f"{tag}-{today:%Y%m%d}"
    if final.is_dir():
        return final
    base.mkdir(parents=True, exist_ok=True)
    with locked(base / f"{tag}.lock"):
        if final.is_dir():
            return final
        work = Path(tempfile.mkdtemp(prefix=f"{tag}-", dir=base))
        try:
            _chmod_tree_dirs(work, cache_dir)
            dirs = _prepare(work, sources, b"")
            lists = work / "lists"
            (lists / "partial").mkdir(parents=True)
            options = apt_options(
                etc=dirs["etc"],
                lists=lists,
                state=dirs["state"],
                cache=dirs["cache"],
                status=dirs["status"],
            )
            with FetchSandbox.open(source_urls(sources)) as sandbox:
                sandbox.own(work)
                try:
                    result = sandbox.run(
                        ["apt-get", *options, *sandbox.apt_options(), "-q", "update"],
                        work=work,
                        timeout=timeout,
                    )
                finally:
                    sandbox.reclaim(work)
            if result.returncode != 0 or re.search(r"^(E:|Err:)", result.output, re.M):
                log.warning(
                    "apt-get update from %s failed: %s", sources, output_tail(result.output)
                )
                raise FetchError(
                    "apt", "could not update the package lists from the Debian archive; try again"
                )
            os.rename(lists, final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        for old in base.glob(f"{tag}-*"):
            stamp = old.name.rsplit("-", 1)[-1]
            if old.is_dir() and stamp.isdigit() and len(stamp) == 8:
                day = datetime.datetime.strptime(stamp, "%Y%m%d").date()
                if (today - day).days >= LISTS_KEPT_DAYS:
                    shutil.rmtree(old, ignore_errors=True)
    return final


def source_urls(sources: Sequence[str]) -> list[str]:
    """The archive URLs of sources.list lines (`deb URL suite component...`)."""
    return [line.split()[1] for line in sources if len(line.split()) > 1]


def fetch_apt(
    packages: Sequence[str],
    dpkg_status: Path,
    cache_dir: Path,
    *,
    sources: Sequence[str] | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    keep_free: int = 0,
    timeout: float = DEFAULT_TIMEOUT,
    org: str = "",
    today: datetime.date | None = None,
) -> Bundle:
    """The .debs that `packages` need on a guest whose dpkg status is `dpkg_status`."""
    names = check_names("apt", packages)
    srcs = list(sources if sources is not None else recipe_for("base").sources())
    if dpkg_status.stat().st_size > MAX_STATUS_BYTES:
        raise FetchError(
            "apt", f"the guest's /var/lib/dpkg/status is over {MAX_STATUS_BYTES >> 20} MiB"
        )
    status = dpkg_status.read_bytes()  # hashed here; only the fetch user's apt parses it
    require("apt-get", "apt")
    lists = _lists(cache_dir, srcs, today or datetime.date.today(), timeout)
    key = apt_key(names, status, srcs, archive_digest(lists))

    def build(files: Path, work: Path) -> None:
        _chmod_tree_dirs(work, cache_dir)
        dirs = _prepare(work, srcs, status)
        options = apt_options(
            etc=dirs["etc"],
            lists=lists,
            state=dirs["state"],
            cache=dirs["cache"],
            status=dirs["status"],
        )
        with FetchSandbox.open(source_urls(srcs)) as sandbox:
            sandbox.own(work)
            try:
                result = sandbox.run(
                    download_argv(names, [*options, *sandbox.apt_options()]),
                    work=work,
                    timeout=timeout,
                    bound=staging_bound("apt", work, max_bytes, keep_free),
                )
            finally:
                sandbox.reclaim(work)
        if result.returncode != 0:
            missing = missing_packages(result.output)
            if missing:
                raise FetchError(
                    "apt",
                    f"no package {', '.join(map(repr, missing))} in Debian "
                    f"{', '.join(s.split()[2] for s in srcs[:1])}: check the "
                    "name (`apt-cache search NAME`) or remove it from the "
                    "step",
                )
            raise FetchError("apt", unknown_failure("apt", names, result.output))
        debs = files / "debs"
        debs.mkdir()
        found = sorted((dirs["cache"] / "archives").glob("*.deb"))
        for deb in found:
            os.rename(deb, debs / deb.name)
        write_script(files, install_script(names, [d.name for d in found]))

    return cached_bundle(
        cache_dir, "apt", key, build, max_bytes=max_bytes, keep_free=keep_free, org=org
    )
