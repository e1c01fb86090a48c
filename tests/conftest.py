"""Tier gates: a tier that cannot run here is skipped with its reason (shown by `pytest -rs`)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sanbox.host.data.layout import DataDir
from sanbox.host.image import ImageError, find_image

from .internet import Internet


def vm_data_dir() -> DataDir:
    return DataDir(Path(os.environ.get("SANBOX_TEST_DATA_DIR", "/var/lib/sanbox-test")))


def vm_tier_unavailable() -> str | None:
    if shutil.which("qemu-system-x86_64") is None:
        return "vm tier needs qemu-system-x86_64 (apt-get install qemu-system-x86)"
    try:
        find_image(vm_data_dir(), "base")
    except ImageError as exc:
        return f"vm tier needs a built base image in {vm_data_dir().root}: {exc}"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    vm_reason = vm_tier_unavailable() if any("vm" in i.keywords for i in items) else None
    root_reason = None if os.geteuid() == 0 else "integration tier needs root"
    for item in items:
        if "vm" in item.keywords and vm_reason:
            item.add_marker(pytest.mark.skip(reason=vm_reason))
        if ("integration" in item.keywords or "vm" in item.keywords) and root_reason:
            item.add_marker(pytest.mark.skip(reason=root_reason))
    # the vm tier first, the computer types' tests last: the types' builds (minutes each under
    # TCG, on the second core) start with the vm tier, and the other vm tests, then the lighter
    # tiers, keep the first core busy meanwhile
    items.sort(key=_order)


def _order(item: pytest.Item) -> int:
    if "vm" not in item.keywords:
        return 1
    return 2 if item.path.name.startswith("test_type") else 0


@pytest.fixture(autouse=True)
def dev_null_untouched() -> Iterator[None]:
    """Every test: /dev/null is still the null device (a download that replaced its target with
    a file it wrote beside it once made it a regular file, and broke every tool after it)."""
    yield
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode), "this test replaced /dev/null"


@pytest.fixture(scope="session", autouse=True)
def cache_home() -> Iterator[Path]:
    """$XDG_CACHE_HOME for the session (the CLI keeps rendered help there): a folder of its own,
    removed at the end, never the user's ~/.cache."""
    folder = Path(tempfile.mkdtemp(prefix="sbcache"))
    before = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(folder)
    try:
        yield folder
    finally:
        if before is None:
            os.environ.pop("XDG_CACHE_HOME", None)
        else:
            os.environ["XDG_CACHE_HOME"] = before
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def internet() -> Iterator[Internet]:
    """The test internet (DNS, HTTP, HTTPS test hosts in a namespace of their own), one per
    session: two at once would both route 198.51.100.0/24 from the host."""
    if shutil.which("nft") is None:
        pytest.skip("the test internet needs nftables (apt-get install nftables)")
    net = Internet.start()
    yield net
    net.stop()


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A folder of its own under /tmp (Unix socket paths below it must stay short), removed with
    what the stand-in driver's "VMs" of its computers left running."""
    path = Path(tempfile.mkdtemp(prefix="sbc", dir="/tmp"))
    yield path
    kill_agents(path)
    shutil.rmtree(path, ignore_errors=True)


def kill_agents(root: Path) -> None:
    """The agents of computers a test left under `root`: a 'VM' here outlives its server, as
    QEMU does, and nothing else would end it."""
    for pidfile in root.rglob("vm.pid"):
        try:
            pid = int(pidfile.read_text())
            if str(root) in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError):
            pass  # gone already


_HANDED: set[int] = set()  # ports free_port gave this session: not given again, nor beside


def free_port() -> int:
    """A port free on 127.0.0.1 whose next port is free too (a host agent serves its calls on one
    and its tunnel on the next), below the kernel's ephemeral range, so no client connection made
    meanwhile takes either as its local port; never one given before in this session, nor one
    beside it (two taken before either is bound overlapped: a host agent's tunnel port was
    another's call port)."""
    low, _high = (
        int(n) for n in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    )
    for _ in range(200):
        port = random.randrange(10000, max(10002, low - 2))
        if _HANDED & {port - 1, port, port + 1}:
            continue
        with socket.socket() as a, socket.socket() as b:
            try:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            _HANDED.add(port)
            return port
    raise AssertionError("no two free ports in a row below the ephemeral range")
