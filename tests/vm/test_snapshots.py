"""Snapshots and forks through the real server, the CLI and the SDK (the host layer's own tests
are in test_snapshots_host.py): what a user types, and what the computers then have."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sanbox import Sanbox
from sanbox.sdk import Computer

from .conftest import cli
from .server import ServerProcess

pytestmark = pytest.mark.vm


def ok(server: ServerProcess, *args: str) -> str:
    r = cli(server, *args)
    assert r.returncode == 0, f"sanbox {' '.join(args)}: {r.stdout}{r.stderr}"
    return r.stdout


def sh(c: Computer, command: str) -> str:
    r = c.exec(command)
    assert r.exit_code == 0, f"{command}: {r.stdout}{r.stderr}"
    return r.stdout.strip()


def identity(c: Computer, user_key: str) -> tuple[str, str, str]:
    """Hostname, machine-id and SSH host key (as `sanbox ssh` learns it)."""
    host_key = c.authorize_ssh_key(user_key).host_key
    return sh(c, "hostname"), sh(c, "cat /etc/machine-id"), host_key


def flip_a_byte(path: object, offset: int) -> None:
    with open(str(path), "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x01]))


def test_snapshots_and_forks_from_the_cli_and_the_sdk(
    server: ServerProcess, client: Sanbox, tmp_path: Path
) -> None:
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    user_key = key.with_suffix(".pub").read_text().strip()
    src = client.computers.create(name="snap-src", idle_timeout=0)
    sh(src, "echo on-disk > /root/disk.txt; echo in-ram > /dev/shm/note; sync")
    sh(src, "nohup sleep 7777 >/dev/null 2>&1 &")

    # a snapshot with memory, from the CLI
    live = json.loads(
        ok(server, "snapshot", "create", "snap-src", "--memory", "--name", "live", "--json")
    )
    assert live["id"].startswith("snp_") and live["memory"] and live["name"] == "live"
    listed = json.loads(ok(server, "snapshot", "ls", "--json"))
    assert [s["name"] for s in listed] == ["live"]
    assert json.loads(ok(server, "snapshot", "get", "live", "--json"))["memory"] is True
    assert sh(src, "cat /dev/shm/note") == "in-ram"  # the source runs on

    # a new computer from it resumes where the snapshot was taken, as someone else
    out = ok(server, "create", "--from-snapshot", "live", "--name", "from-live")
    assert "memory: restored" in out, out
    restored = client.computers.get("from-live")
    assert restored.origin == live["id"] and restored.memory == "restored"
    assert sh(restored, "cat /dev/shm/note; cat /root/disk.txt") == "in-ram\non-disk"
    assert sh(restored, "pgrep -f 'sleep 7777' >/dev/null && echo alive") == "alive"
    assert identity(restored, user_key) != identity(src, user_key)

    # three forks of the running source: its files and processes, their own writes and identity
    forks = json.loads(ok(server, "fork", "snap-src", "--count", "3", "--name", "br", "--json"))
    assert [f["name"] for f in forks] == ["br-1", "br-2", "br-3"]
    branches = [client.computers.get(f["name"]) for f in forks]
    for i, b in enumerate(branches):
        assert b.origin == src.id and b.state == "running"
        assert sh(b, "cat /root/disk.txt /dev/shm/note") == "on-disk\nin-ram"
        assert sh(b, "pgrep -f 'sleep 7777' >/dev/null && echo alive") == "alive"
        sh(b, f"echo mine > /root/branch-{i}")
    for i, b in enumerate(branches):
        assert sh(b, "ls /root | grep branch- || true") == f"branch-{i}"
    ids = [identity(c, user_key) for c in (src, *branches)]
    for part in range(3):  # hostname, machine-id, host key: each its own
        assert len({i[part] for i in ids}) == 4, ids
    randoms = {sh(b, "head -c 16 /dev/urandom | od -An -tx1") for b in branches}
    assert len(randoms) == 3

    # a disk-only snapshot outlives the computer it was taken of
    disk = src.snapshot(name="disk")
    assert not disk.memory and disk.computer_id == src.id
    src.delete()
    assert {s.name for s in client.snapshots.list()} == {"live", "disk"}
    booted = client.computers.create(from_snapshot="disk", name="from-disk")
    assert booted.origin == disk.id and booted.memory != "restored"
    assert sh(booted, "cat /root/disk.txt; ls /dev/shm/note 2>/dev/null || echo gone") == (
        "on-disk\ngone"
    )  # booted on its disk: the tmpfs did not survive, as a boot says
    for c in (restored, *branches, booted):
        c.delete()

    # a damaged snapshot is refused with the reason, and nothing is made of it
    flip_a_byte(server.data_dir.snapshot(live["id"]) / "memory" / "memory", 4096 * 10)
    r = cli(server, "create", "--from-snapshot", "live", "--name", "from-damaged")
    assert r.returncode != 0 and "snapshot_corrupt" in r.stderr, r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert "from-damaged" not in {c.name for c in client.computers.list()}

    ok(server, "snapshot", "rm", "live", "disk")
    assert client.snapshots.list() == []
    gone = {live["id"], disk.id}  # their files too (other tests' template layers may stay)
    assert not [p for p in server.data_dir.snapshots.iterdir() if p.name in gone]
    r = cli(server, "snapshot", "get", "live")
    assert r.returncode != 0 and "snapshot_not_found" in r.stderr
