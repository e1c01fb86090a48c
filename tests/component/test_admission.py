"""A host with no room says so before anything is made: a computer whose RAM would not fit in the
shared-memory filesystem, or whose disk would not fit on the data filesystem once the disks
already there fill, is refused with 507 and a stable code, leaving no record and no folder."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Server

pytestmark = pytest.mark.component


def nothing_made(server: Server, name: str) -> None:
    listed = server.client.get("/v1/computers", headers=server.headers()).json()["computers"]
    assert name not in {c["name"] for c in listed}
    assert server.data_dir.computer_ids() == []


def test_a_disk_that_existing_disks_will_need_is_refused(server: Server) -> None:
    """Another computer's sparse disk may still grow past all the free space: a new 1 GiB disk
    does not fit, though the space is free right now."""
    free = os.statvfs(server.data_dir.root)
    other = server.data_dir.computers / "cmp_sparse"
    other.mkdir(parents=True)
    with open(other / "disk.raw", "wb") as f:
        f.truncate(free.f_bavail * free.f_frsize + 2 * 1024**3)  # sparse: takes nothing yet
    try:
        r = server.client.post(
            "/v1/computers", json={"name": "wants-disk"}, headers=server.headers()
        )
        assert r.status_code == 507, r.text
        assert r.json()["error"]["code"] == "insufficient_storage"
        assert "data filesystem" in r.json()["error"]["message"]
        listed = server.client.get("/v1/computers", headers=server.headers()).json()["computers"]
        assert listed == []
        assert server.data_dir.computer_ids() == ["cmp_sparse"]  # nothing new
    finally:
        (other / "disk.raw").unlink()
        other.rmdir()
    r = server.client.post("/v1/computers", json={"name": "wants-disk"}, headers=server.headers())
    assert r.status_code == 201, r.text  # the same request, once the promise is gone


@pytest.fixture
def small_ram_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """SANBOX_RAM_DIR on a real 200 MiB tmpfs (mounting needs root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs for the RAM dir needs root")
    path = Path(tempfile.mkdtemp(prefix="sbram", dir="/tmp"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200m", "tmpfs", str(path)], check=True)
    monkeypatch.setenv("SANBOX_RAM_DIR", str(path))
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)
        path.rmdir()


def test_ram_that_running_guests_will_need_is_refused(small_ram_dir: Path, server: Server) -> None:
    """200 MiB free, but a running guest's 150 MiB RAM file (sparse: 0 used) may grow into it:
    a 128 MiB guest does not fit."""
    with open(small_ram_dir / "sanbox-0a0a0a-cmp_running.ram", "wb") as f:
        f.truncate(150 * 1024**2)
    body = {"name": "wants-ram", "memory_mib": 128}
    r = server.client.post("/v1/computers", json=body, headers=server.headers())
    assert r.status_code == 507, r.text
    assert r.json()["error"]["code"] == "insufficient_memory"
    assert str(small_ram_dir) in r.json()["error"]["message"]
    nothing_made(server, "wants-ram")
    (small_ram_dir / "sanbox-0a0a0a-cmp_running.ram").unlink()
    r = server.client.post("/v1/computers", json=body, headers=server.headers())
    assert r.status_code == 201, r.text


def test_a_start_that_does_not_fit_leaves_the_computer_stopped(
    small_ram_dir: Path, server: Server
) -> None:
    h = server.headers()
    r = server.client.post("/v1/computers", json={"name": "big", "memory_mib": 128}, headers=h)
    assert r.status_code == 201, r.text
    assert server.client.post("/v1/computers/big/stop", headers=h).json()["state"] == "stopped"
    with open(small_ram_dir / "sanbox-0a0a0a-cmp_running.ram", "wb") as f:
        f.truncate(150 * 1024**2)  # another guest's RAM may grow: 128 MiB no longer fits
    r = server.client.post("/v1/computers/big/start", headers=h)
    assert r.status_code == 507 and r.json()["error"]["code"] == "insufficient_memory"
    assert server.client.get("/v1/computers/big", headers=h).json()["state"] == "stopped"


@pytest.fixture
def vm_overhead(monkeypatch: pytest.MonkeyPatch) -> int:
    """Each VM's hypervisor counted at 60 MiB (SANBOX_VM_OVERHEAD_MIB: the local stand-in runs
    none of its own)."""
    monkeypatch.setenv("SANBOX_VM_OVERHEAD_MIB", "60")
    return 60


def test_a_vm_is_admitted_with_its_hypervisor_and_running_ones_count_theirs(
    vm_overhead: int, small_ram_dir: Path, server: Server
) -> None:
    """200 MiB free: a 160 MiB guest fits by its RAM alone, not with its hypervisor's 60 MiB;
    a 128 MiB one does, and its running hypervisor then leaves no room for another. An org's
    memory quota counts the guest memory it asked for, not the overhead."""
    h = server.headers()
    r = server.client.post("/v1/computers", json={"name": "wide", "memory_mib": 160}, headers=h)
    assert r.status_code == 507, r.text
    error = r.json()["error"]
    assert error["code"] == "insufficient_memory"
    assert error["message"].startswith(
        f"160 MiB of guest memory and {vm_overhead} MiB for its hypervisor (local-process) do "
        f"not fit in {small_ram_dir}: 200 MiB free, 0 MiB of it promised"
    )
    nothing_made(server, "wide")
    body = {"name": "one", "memory_mib": 128}
    assert server.client.post("/v1/computers", json=body, headers=h).status_code == 201
    r = server.client.post("/v1/computers", json={**body, "name": "two"}, headers=h)
    assert r.status_code == 507 and r.json()["error"]["code"] == "insufficient_memory", r.text
    assert f"{vm_overhead} MiB of it promised" in r.json()["error"]["message"]  # one's hypervisor
    use = server.client.get("/v1/orgs/default/quota", headers=h).json()["use"]
    assert use["memory_mib"] == 128
    assert server.client.post("/v1/computers/one/stop", headers=h).json()["state"] == "stopped"
    r = server.client.post("/v1/computers", json={**body, "name": "two"}, headers=h)
    assert r.status_code == 201, r.text  # a stopped computer's hypervisor is gone
    r = server.client.post("/v1/computers/one/start", headers=h)
    assert r.status_code == 507 and r.json()["error"]["code"] == "insufficient_memory", r.text
    assert server.client.get("/v1/computers/one", headers=h).json()["state"] == "stopped"
