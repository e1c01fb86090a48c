"""Pruning the fetched-package cache (`<data dir>/cache`: apt lists, shared by the host's orgs,
and apt, pip and npm bundles, each an org's own): bundles older than a maximum age go, then the
oldest ones until the cache fits a size bound; staging folders left by a crash go too. Every
fetch prunes before it adds a bundle (`fetch_common.cached_bundle`); an operator can run it:

    python -m sanbox.templates.fetch_cache /var/lib/sanbox/cache [--max-age-days 7] [--max-gib 20]

A bundle in use by a running fetch is held under its lock file and skipped."""

from __future__ import annotations

import argparse
import fcntl
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

BUNDLE_MAX_AGE = 7 * 86400  # seconds a bundle is reused; then fetched again (a moved index)
MAX_CACHE_BYTES = 20 << 30  # the cache's bundles together
STAGING_MAX_AGE = 86400  # seconds a staging folder under tmp/ may be left


@dataclass(frozen=True)
class Pruned:
    removed: int
    freed_bytes: int
    kept: int


def _size(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _remove_unless_locked(cache: Path, bundle: Path) -> bool:
    lock = cache / "locks" / f"{bundle.name}.lock"
    if not lock.exists():
        shutil.rmtree(bundle, ignore_errors=True)
        return True
    with lock.open("a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # a fetch of it runs now
        try:
            shutil.rmtree(bundle, ignore_errors=True)
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
    return True


def prune(
    cache: Path,
    *,
    max_age: float = BUNDLE_MAX_AGE,
    max_bytes: int = MAX_CACHE_BYTES,
    now: float | None = None,
) -> Pruned:
    """Remove bundles older than `max_age` seconds, then the oldest until `max_bytes` fit."""
    now = time.time() if now is None else now
    removed = freed = 0
    bundles = []
    for bundle in sorted((cache / "bundles").glob("*")) if (cache / "bundles").is_dir() else []:
        try:
            age = now - (bundle / "bundle.json").stat().st_mtime
        except OSError:
            age = float("inf")  # damaged: no bundle.json
        bundles.append((age, bundle, _size(bundle)))
    bundles.sort(key=lambda item: item[0], reverse=True)  # oldest first
    total = sum(size for _, _, size in bundles)
    kept = 0
    for age, bundle, size in bundles:
        if (age > max_age or total > max_bytes) and _remove_unless_locked(cache, bundle):
            removed, freed, total = removed + 1, freed + size, total - size
        else:
            kept += 1
    for staging in (cache / "tmp").glob("*") if (cache / "tmp").is_dir() else []:
        if now - staging.stat().st_mtime > STAGING_MAX_AGE:
            shutil.rmtree(staging, ignore_errors=True)
    return Pruned(removed, freed, kept)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Prune Sanbox's fetched-package cache.")
    parser.add_argument("cache", type=Path, help="the cache folder (<data dir>/cache)")
    parser.add_argument("--max-age-days", type=float, default=BUNDLE_MAX_AGE / 86400)
    parser.add_argument("--max-gib", type=float, default=MAX_CACHE_BYTES / 2**30)
    args = parser.parse_args(argv)
    pruned = prune(
        args.cache, max_age=args.max_age_days * 86400, max_bytes=int(args.max_gib * 2**30)
    )
    print(
        f"removed {pruned.removed} bundle(s), {pruned.freed_bytes >> 20} MiB freed; "
        f"{pruned.kept} kept"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
