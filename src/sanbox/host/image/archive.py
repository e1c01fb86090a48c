"""Which state of the Debian archive an image was built from, and which packages it got.

mmdebstrap installs whatever versions the mirror serves on the day, so two builds of one recipe
differ when the archive has moved. The archive's state is its *stamp*: for each suite the recipe
uses, the SHA-256 that its signed `InRelease` file gives for `main/binary-amd64/Packages` (it
changes exactly when that suite's packages do). `sanbox image build` reads it from the mirror,
and the stamp is part of the build's content hash: a moved archive is a new build, whose
manifest lists every package with its version, and the builder says what changed against the
build before it. The stamp of the current build is kept in `images/<template>/archive.json`, so
finding the current build never needs the network.

The parsers are pure; `fetch_stamp` is the one function that reads the network."""

from __future__ import annotations

import hashlib
import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

STAMP_FILE = "archive.json"
INDEX = "main/binary-amd64/Packages"
FETCH_TIMEOUT = 20.0  # seconds per InRelease file
MAX_RELEASE_BYTES = 4 << 20  # an InRelease file is ~150 KB
MAX_LISTED_CHANGES = 12  # package changes a summary names (the rest are counted)


class ArchiveError(Exception):
    """The mirror could not be read or did not answer like a Debian archive."""


def suites(sources: Sequence[str]) -> list[str]:
    """`deb URL SUITE main` lines -> the `URL/dists/SUITE` of each."""
    out = []
    for line in sources:
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "deb":
            out.append(f"{parts[1].rstrip('/')}/dists/{parts[2]}")
    return out


def index_digest(release: str) -> str | None:
    """The SHA-256 an `InRelease`/`Release` file gives for `main/binary-amd64/Packages`."""
    section = False
    for line in release.splitlines():
        if not line.startswith(" "):
            section = line.strip() == "SHA256:"
            continue
        fields = line.split()
        if section and len(fields) == 3 and fields[2] == INDEX:
            return fields[0]
    return None


def digest(stamp: Mapping[str, str]) -> str:
    """One short hash of a stamp (suite -> index digest), for a build's content hash."""
    return hashlib.sha256(json.dumps(dict(stamp), sort_keys=True).encode()).hexdigest()[:16]


def fetch_stamp(sources: Sequence[str]) -> dict[str, str]:
    """The archive's stamp now, from the mirror; ArchiveError when it cannot be read."""
    stamp = {}
    for suite in suites(sources):
        url = f"{suite}/InRelease"
        try:
            with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT) as resp:  # noqa: S310
                body = resp.read(MAX_RELEASE_BYTES + 1)
        except (OSError, urllib.error.URLError) as exc:
            raise ArchiveError(f"could not read {url}: {exc}") from exc
        if len(body) > MAX_RELEASE_BYTES:
            raise ArchiveError(f"{url} is larger than an InRelease file can be")
        found = index_digest(body.decode(errors="replace"))
        if found is None:
            raise ArchiveError(f"{url} lists no {INDEX}: is this a Debian mirror?")
        stamp[suite] = found
    return stamp


def read_stamp(template_dir: Path) -> dict[str, str] | None:
    """The stamp the current build of a template was made from (None: none recorded)."""
    try:
        data = json.loads((template_dir / STAMP_FILE).read_text())
        return {str(k): str(v) for k, v in data["stamp"].items()}
    except (OSError, ValueError, KeyError, AttributeError, TypeError):
        return None


def write_stamp(template_dir: Path, stamp: Mapping[str, str]) -> None:
    template_dir.mkdir(parents=True, exist_ok=True)
    tmp = template_dir / f".{STAMP_FILE}.{os.getpid()}"
    tmp.write_text(json.dumps({"stamp": dict(stamp)}, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, template_dir / STAMP_FILE)


def installed(status: str) -> dict[str, str]:
    """Package -> version of what a dpkg status file says is installed."""
    out: dict[str, str] = {}
    for entry in status.split("\n\n"):
        fields: dict[str, str] = {}
        for line in entry.splitlines():
            if line[:1].isspace() or ":" not in line:
                continue
            key, _, value = line.partition(":")
            fields[key] = value.strip()
        if "Package" in fields and fields.get("Status", "").endswith(" installed"):
            arch = fields.get("Architecture", "")
            name = (
                fields["Package"] if arch in ("", "all", "amd64") else f"{fields['Package']}:{arch}"
            )
            out[name] = fields.get("Version", "")
    return out


def changes(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """What changed between two package lists, one entry a package, sorted by name."""
    out = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if old == new:
            continue
        if old is None:
            out.append(f"+{name} {new}")
        elif new is None:
            out.append(f"-{name} {old}")
        else:
            out.append(f"{name} {old} -> {new}")
    return out


def summary(before: Mapping[str, str], after: Mapping[str, str]) -> str:
    """One line: how many packages changed, naming the first few."""
    diff = changes(before, after)
    if not diff:
        return "the same packages"
    named = ", ".join(diff[:MAX_LISTED_CHANGES])
    more = f" and {len(diff) - MAX_LISTED_CHANGES} more" if len(diff) > MAX_LISTED_CHANGES else ""
    return f"{len(diff)} package(s) changed: {named}{more}"
