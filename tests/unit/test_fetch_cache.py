"""The bundle cache: a key is fetched once and then reused, concurrent fetches of one key neither
run the tools twice nor see a half-written bundle, and a failed or oversized fetch leaves nothing
behind that a later fetch could take for a bundle."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

from sanbox.templates import fetch_cache, fetch_common
from sanbox.templates.fetch_common import (
    Bundle,
    FetchError,
    cached_bundle,
    output_tail,
    run_tool,
    write_script,
)

pytestmark = pytest.mark.unit
KEY = "0f" * 32


class Builder:
    """Counts how often the tools would have run; writes one file of `size` bytes."""

    def __init__(self, size: int = 10, fail: bool = False) -> None:
        self.calls, self.size, self.fail = 0, size, fail
        self.started = threading.Event()
        self.release = threading.Event()
        self.release.set()

    def __call__(self, files: Path, work: Path) -> None:
        self.calls += 1
        self.started.set()
        self.release.wait(30)
        (work / "scratch").write_text("not part of the bundle")
        (files / "data").mkdir()
        (files / "data" / "blob").write_bytes(b"x" * self.size)
        write_script(files, "#!/bin/sh\ntrue\n")
        if self.fail:
            raise FetchError("apt", "no package 'nosuch'")


def leftovers(cache: Path) -> list[str]:
    return sorted(
        p.name
        for sub in ("bundles", "tmp")
        if (cache / sub).exists()
        for p in (cache / sub).iterdir()
    )


def test_the_second_fetch_of_a_key_is_a_cache_hit(tmp_path: Path) -> None:
    build = Builder()
    first = cached_bundle(tmp_path, "apt", KEY, build)
    second = cached_bundle(tmp_path, "apt", KEY, build)
    assert build.calls == 1 and first == second
    assert first.files == ("data/blob", "install.sh") and first.size == 10 + 15
    assert (first.path / "data" / "blob").read_bytes() == b"x" * 10
    assert not (first.path.parent / "work").exists()  # scratch space is not kept
    assert first.guest_dir.endswith(KEY[:16]) and first.install[-1].endswith("/install.sh")


def test_concurrent_fetches_of_one_key_run_the_tools_once(tmp_path: Path) -> None:
    build = Builder(size=1 << 20)
    build.release.clear()  # the first fetch is still downloading while the others arrive
    results: list[Bundle] = []
    threads = [
        threading.Thread(target=lambda: results.append(cached_bundle(tmp_path, "pip", KEY, build)))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    assert build.started.wait(10)
    build.release.set()
    for t in threads:
        t.join(30)
    assert build.calls == 1 and len(results) == 4 and len(set(results)) == 1
    assert (results[0].path / "data" / "blob").stat().st_size == 1 << 20
    assert leftovers(tmp_path) == [f"pip-{KEY}"]


def test_a_bundle_over_the_size_limit_is_refused_and_not_kept(tmp_path: Path) -> None:
    with pytest.raises(FetchError, match="more than the limit of 1 MiB"):
        cached_bundle(tmp_path, "npm", KEY, Builder(size=2 << 20), max_bytes=1 << 20)
    assert leftovers(tmp_path) == []


def test_a_failed_fetch_leaves_nothing_and_the_next_one_tries_again(tmp_path: Path) -> None:
    with pytest.raises(FetchError, match="nosuch"):
        cached_bundle(tmp_path, "apt", KEY, Builder(fail=True))
    assert leftovers(tmp_path) == []
    build = Builder()
    cached_bundle(tmp_path, "apt", KEY, build)
    assert build.calls == 1


def test_a_chatty_tool_keeps_only_the_tail_of_its_output(tmp_path: Path) -> None:
    code = "import sys\nfor i in range(200000): print('line', i)\nsys.exit(3)"
    result = run_tool([sys.executable, "-c", code], work=tmp_path, keep=4096)
    assert result.returncode == 3 and len(result.output) <= 4096
    assert result.output.rstrip().endswith("line 199999")
    tail = output_tail(result.output, limit=200)
    assert len(tail) <= 201 and "\n" not in tail


def test_a_tool_that_hangs_is_stopped_and_says_so(tmp_path: Path) -> None:
    code = "import time; print('waiting', flush=True); time.sleep(60)"
    result = run_tool([sys.executable, "-c", code], work=tmp_path, timeout=0.5)
    assert result.returncode != 0 and "did not finish within" in result.output


def _bundle(cache: Path, name: str, size: int, age: float, now: float) -> Path:
    folder = cache / "bundles" / name
    (folder / "files").mkdir(parents=True)
    (folder / "files" / "x").write_bytes(b"x" * size)
    (folder / "bundle.json").write_text("{}")
    os.utime(folder / "bundle.json", (now - age, now - age))
    return folder


def test_prune_removes_old_bundles_then_the_oldest_past_the_size_bound(tmp_path: Path) -> None:
    now = time.time()
    old = _bundle(tmp_path, "pip-old", 10, 30 * 86400, now)
    middle = _bundle(tmp_path, "pip-mid", 1000, 2 * 86400, now)
    new = _bundle(tmp_path, "pip-new", 1000, 60, now)
    pruned = fetch_cache.prune(tmp_path, max_age=7 * 86400, max_bytes=1500, now=now)
    assert not old.exists() and not middle.exists() and new.exists()
    assert (pruned.removed, pruned.kept) == (2, 1)


def test_a_stale_bundle_is_fetched_again(tmp_path: Path) -> None:
    made: list[int] = []

    def build(files: Path, work: Path) -> None:
        (files / "f").write_text("x")
        made.append(1)

    fetch_common.cached_bundle(tmp_path, "pip", "k" * 64, build)
    fetch_common.cached_bundle(tmp_path, "pip", "k" * 64, build)
    assert len(made) == 1
    stamp = tmp_path / "bundles" / f"pip-{'k' * 64}" / "bundle.json"
    old = time.time() - fetch_cache.BUNDLE_MAX_AGE - 60
    os.utime(stamp, (old, old))
    fetch_common.cached_bundle(tmp_path, "pip", "k" * 64, build)
    assert len(made) == 2


def test_every_fetch_prunes_the_cache_before_it_adds_a_bundle(tmp_path: Path) -> None:
    """Not only when a build starts: one build of many large steps stays within the bounds."""
    now = time.time()
    old = _bundle(tmp_path, "pip-old", 10, 30 * 86400, now)
    cached_bundle(tmp_path, "npm", KEY, Builder())
    assert not old.exists()


def test_one_org_never_hits_another_orgs_bundle(tmp_path: Path) -> None:
    """It would learn, by the fetch's speed, that the other fetched the same packages."""
    build = Builder()
    first = cached_bundle(tmp_path, "pip", KEY, build, org="org_a")
    cached_bundle(tmp_path, "pip", KEY, build, org="org_a")
    assert build.calls == 1
    second = cached_bundle(tmp_path, "pip", KEY, build, org="org_b")
    assert build.calls == 2 and first.key != second.key and first.path != second.path
