"""`sanbox move` between two fleet hosts (real host agents over mutual TLS, on the local driver;
the disks are real qcow2 files): a stopped computer's disk is copied and verified onto the other
host of its region, the record then names that host, and the first copy is gone. A disk damaged
on the way is refused by the host that takes it: the computer stays where it was, whole, and
nothing of it is left on the other host. A running computer, a host of another region and a
host that is not there are refused before anything is written. A carry whose bytes stop moving
is cut within its bound, not the link's timeout, and leaves the computer where it was."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Coroutine, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx
import pytest

from sanbox import Sanbox
from sanbox.fleet.link import link
from sanbox.fleet.link.agent import HostAgent
from sanbox.fleet.link.pki import FleetCAs, host_identity
from sanbox.host.data.layout import DataDir
from sanbox.host.data.space import Room
from sanbox.host.disk.transfer import DiskExport
from sanbox.host.door import HostFullError
from sanbox.host.drivers.local import LocalDriver
from sanbox.host.image import Image
from sanbox.host.runtime import HostRuntime
from sanbox.host.snapshot import SnapshotManifest
from sanbox.host.snapshot.transfer import SnapshotExport
from sanbox.sdk.errors import SanboxError
from sanbox.sdk.sync import Computer

from .conftest import LiveServer, fake_image
from .test_host_link import (
    _free_port,
    _hosts,
    _sanbox,
    _serving,
    _until,
    _wait_until_up,
    join_host,
    serving_fleet,
)

pytestmark = pytest.mark.component
PATTERN = "write -P 0x5a 300M 3M"  # what the guest wrote: 3 MiB at 300 MiB into its disk


@dataclass
class Refusals:
    """Disks and snapshots coming in that the hosts refuse `host_full`, whichever host they
    come to (`left`), and the hosts that refused one, in order."""

    left: int = 0
    by: list[str] = field(default_factory=list)


class _Damaging(HostRuntime):
    """A host on whose link one byte of a disk coming in is flipped, while `damage` is set; and
    that stops taking a carry after its first chunk, while `stall` is set; whose data filesystem
    has `free` bytes free, as its admission and its report see it, when that is set; that
    refuses a disk or a snapshot coming in for room while its `refusals` has any left."""

    damage = True
    stall = False
    free: int | None = None
    refusals = Refusals()

    def room(self, computer_id: str | None = None, disk: bool = True) -> tuple[Room, Room | None]:
        ram, data = super().room(computer_id, disk)
        if data is not None and self.free is not None:
            data = replace(data, free=self.free)
        return ram, data

    def import_disk(
        self,
        computer_id: str,
        export: DiskExport,
        image: Image | None,
        chunks: AsyncIterator[bytes],
    ) -> Coroutine[object, object, None]:
        self._refused()
        return super().import_disk(computer_id, export, image, self._flipped(chunks))

    def _refused(self) -> None:
        if self.refusals.left > 0:
            self.refusals.left -= 1
            self.refusals.by.append(self.data_dir.root.name)
            raise HostFullError("insufficient_storage: no room here (the test's word)")

    def import_snapshot(
        self,
        snapshot_id: str,
        export: SnapshotExport,
        image: Image,
        chunks: AsyncIterator[bytes],
    ) -> Coroutine[object, object, SnapshotManifest]:
        self._refused()
        return super().import_snapshot(snapshot_id, export, image, self._flipped(chunks))

    async def _flipped(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        first = self.damage
        async for data in chunks:
            if first and data:
                data = bytes([data[0] ^ 1]) + data[1:]
            first = False
            yield data
            while self.stall:  # taking nothing more until told to go on
                await asyncio.sleep(0.05)


@dataclass
class Fleet:
    live: LiveServer
    dirs: dict[str, Path]
    h2: _Damaging
    h2_agent: HostAgent
    h1: _Damaging  # damages nothing: its `free` is set
    h1_agent: HostAgent
    refusals: Refusals  # shared by every host


@pytest.fixture
def fleet_server(short_tmp: Path) -> Iterator[LiveServer]:
    yield from serving_fleet(short_tmp, lease=2.0, lost_after=4.0)


@pytest.fixture
def fleet(
    fleet_server: LiveServer, short_tmp: Path, request: pytest.FixtureRequest
) -> Iterator[Fleet]:
    """h1 and h2 in eu-1, h3 in us-1 (or where the test's parameter puts it)."""
    live = fleet_server
    dirs = {n: short_tmp / n for n in ("h1", "h2", "h3")}
    ports = {n: _free_port() for n in dirs}
    regions = {"h1": "eu-1", "h2": "eu-1", "h3": "us-1", **getattr(request, "param", {})}
    refusals = Refusals()
    control = FleetCAs(live.data_dir.root / "fleet").control_identity()
    runtimes: dict[str, HostRuntime] = {}
    agents: dict[str, HostAgent] = {}
    with ExitStack() as stack:
        for name, d in dirs.items():
            join_host(live, d, ports[name], name, regions[name])
            fake_image(DataDir(d))
            rt = _Damaging(DataDir(d), LocalDriver(), networking=False)
            rt.damage, rt.refusals = name == "h2", refusals
            runtimes[name] = rt
            me = host_identity(DataDir(d).host / "fleet")
            agents[name] = HostAgent(rt)
            stack.enter_context(_serving(agents[name], ports[name], me))
        for port in ports.values():
            _wait_until_up(f"https://127.0.0.1:{port}", control)
        _until("three hosts up", lambda: sum(bool(h.layers) for h in _hosts(live)) == 3)
        h1, h2 = runtimes["h1"], runtimes["h2"]
        assert isinstance(h1, _Damaging) and isinstance(h2, _Damaging)
        yield Fleet(live, dirs, h2, agents["h2"], h1, agents["h1"], refusals)


def _qemu_io(disk: Path, command: str) -> subprocess.CompletedProcess[str]:
    shared = ["-r", "-U"] if command.startswith("read") else []  # a running one may hold it
    return subprocess.run(
        ["qemu-io", *shared, "-f", "qcow2", "-c", command, str(disk)],
        capture_output=True,
        text=True,
    )


def made_on_h1(client: Sanbox, name: str, stopped: bool = True) -> Computer:
    """A computer of region eu-1 made on h1 (h2 drained meanwhile), stopped unless asked."""
    client.orgs.set_regions(client.orgs.list()[0].name, "eu-1")
    client.fleet.drain("h2")
    c = client.computers.create(name=name, idle_timeout=0)
    client.fleet.drain("h2", False)
    if stopped:
        c.stop()
    return c


def _disk(host_dir: Path, computer_id: str) -> Path:
    return DataDir(host_dir).computer(computer_id).disk


def _snapshots_on(dirs: dict[str, Path], snapshot_id: str) -> list[str]:
    return [n for n, d in dirs.items() if (d / "snapshots" / snapshot_id).exists()]


def _on(dirs: dict[str, Path], computer_id: str) -> list[str]:
    return [n for n, d in dirs.items() if (d / "computers" / computer_id).exists()]


def test_a_stopped_computer_moves_with_its_disk_and_a_damaged_copy_is_refused(
    fleet: Fleet,
) -> None:
    live, dirs = fleet.live, fleet.dirs
    with Sanbox(live.url, live.key, timeout=60) as client:
        c = made_on_h1(client, "mover", stopped=False)
        assert _on(dirs, c.id) == ["h1"]

        refused = _sanbox(live, "move", "mover")
        assert refused.returncode != 0 and "stop" in refused.stderr, refused.stderr
        c.stop()
        wrote = _qemu_io(_disk(dirs["h1"], c.id), PATTERN)  # the guest's writes, on its disk
        assert wrote.returncode == 0, wrote.stderr

        # damaged on the way: refused by h2; the computer stays on h1, whole and stopped
        bad = _sanbox(live, "move", "mover", "--to", "h2")
        assert bad.returncode != 0 and "damaged" in bad.stderr, bad.stderr
        assert _on(dirs, c.id) == ["h1"], "a damaged copy was kept, or the first one lost"
        assert c.refresh().state == "stopped"
        assert [e.type for e in c.events()][-1] == "computer.move_failed"

        # another region, or no such host: refused before anything is written
        cross = _sanbox(live, "move", "mover", "--to", "h3")
        assert cross.returncode != 0 and "region" in cross.stderr, cross.stderr
        missing = _sanbox(live, "move", "mover", "--to", "nowhere")
        assert missing.returncode != 0 and "no host" in missing.stderr, missing.stderr
        assert _on(dirs, c.id) == ["h1"]

        # a snapshot of it moves the same way: damaged, refused; whole, checked and sealed
        snap = c.snapshot(name="moving")
        bad = _sanbox(live, "snapshot", "move", "moving", "--to", "h2")
        assert bad.returncode != 0 and "damaged" in bad.stderr, bad.stderr
        assert _snapshots_on(dirs, snap.id) == ["h1"]
        cross = _sanbox(live, "snapshot", "move", "moving", "--to", "h3")
        assert cross.returncode != 0 and "region" in cross.stderr, cross.stderr
        fleet.h2.damage = False
        moved_snap = _sanbox(live, "snapshot", "move", "moving")
        assert moved_snap.returncode == 0, moved_snap.stderr
        assert _snapshots_on(dirs, snap.id) == ["h2"]
        copy = client.computers.create(name="from-moved", from_snapshot=snap.id, idle_timeout=0)
        assert _on(dirs, copy.id) == ["h2"], "a copy made where the snapshot is not"
        read = _qemu_io(_disk(dirs["h2"], copy.id), PATTERN.replace("write", "read"))
        assert read.returncode == 0 and "verification failed" not in read.stdout, read.stderr
        copy.delete()

        # whole on the way: moved (the best other host of its region is h2), files kept
        moved = _sanbox(live, "move", "mover")
        assert moved.returncode == 0, moved.stderr
        assert "verified" in moved.stdout
        assert _on(dirs, c.id) == ["h2"], "the first copy stays, or the new one is missing"
        read = _qemu_io(_disk(dirs["h2"], c.id), PATTERN.replace("write", "read"))
        assert read.returncode == 0 and "verification failed" not in read.stdout, read.stdout
        events = [(e.type, e.data) for e in c.events()]
        done = [d for t, d in events if t == "computer.moved"]
        assert done and done[-1]["from"] == "h1" and done[-1]["to"] == "h2", events
        assert c.refresh().state == "stopped"
        c.start()
        assert c.exec("true").exit_code == 0
        c.delete()
        assert _on(dirs, c.id) == []


def test_a_carry_that_stalls_is_cut_and_the_computer_stays(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The taking host stops reading mid-disk: the move fails within the stall bound (not the
    link's 300 s), the computer stays on its host, stopped, and once the taker goes on, nothing
    of it is left there; the same move then goes through."""
    monkeypatch.setattr(link, "STALL_TIMEOUT", 2.0)
    live, dirs = fleet.live, fleet.dirs
    fleet.h2.damage = False
    with Sanbox(live.url, live.key, timeout=60) as client:
        c = made_on_h1(client, "stuck")
        big = _qemu_io(_disk(dirs["h1"], c.id), "write -P 0x33 0 64M")  # more than sockets hold
        assert big.returncode == 0, big.stderr
        fleet.h2.stall = True
        try:
            started = time.monotonic()
            stuck = _sanbox(live, "move", "stuck", "--to", "h2")
            took = time.monotonic() - started
        finally:
            fleet.h2.stall = False
        assert stuck.returncode != 0 and "stalled" in stuck.stderr, stuck.stderr
        assert took < 30, took
        assert c.refresh().state == "stopped" and _on(dirs, c.id)[0] == "h1"
        failed = [e for e in c.events() if e.type == "computer.move_failed"]
        assert failed and "stalled" in failed[-1].message, failed
        _until("nothing of it on h2", lambda: _on(dirs, c.id) == ["h1"])
        moved = _sanbox(live, "move", "stuck", "--to", "h2")
        assert moved.returncode == 0, moved.stderr
        assert _on(dirs, c.id) == ["h2"]
        c.delete()


def test_two_moves_of_one_snapshot_at_once_leave_it_whole_where_the_first_put_it(
    fleet: Fleet,
) -> None:
    """A move retried while the first still runs (the SDK timed out, say): the second waits for
    the first and then finds the snapshot on that host already. Before, the second's undo of its
    refused import deleted the first's copy, and the record named a host holding nothing."""
    live, dirs = fleet.live, fleet.dirs
    fleet.h2.damage = False
    with Sanbox(live.url, live.key, timeout=60) as client:
        c = made_on_h1(client, "snapped")
        snap = c.snapshot(name="twice")
        assert _snapshots_on(dirs, snap.id) == ["h1"]
        answers: list[object] = []

        def move() -> None:
            try:
                answers.append(client.fleet.move_snapshot(snap.id, "h2"))
            except SanboxError as exc:
                answers.append(exc.code)

        both = [threading.Thread(target=move) for _ in range(2)]
        for thread in both:
            thread.start()
        for thread in both:
            thread.join(120)
        assert sorted(map(str, (a if isinstance(a, str) else "moved" for a in answers))) == [
            "moved",
            "same_host",
        ], answers
        assert _snapshots_on(dirs, snap.id) == ["h2"], "the copy the record names is gone"
        made = client.computers.create(name="from-twice", from_snapshot=snap.id, idle_timeout=0)
        assert _on(dirs, made.id) == ["h2"]
        made.delete()
        client.snapshots.delete(snap.id)
        c.delete()


def test_a_move_sent_again_with_its_key_answers_where_the_first_put_it(fleet: Fleet) -> None:
    """`sanbox snapshot move SNAP` (and `sanbox move NAME`) without `--to` goes to the best host
    but the one that holds it: run again after a lost answer, it moved the item back. With the
    same Idempotency-Key it answers where the first move left it; a new key is a new move, and
    the key asking for another host is refused with one line."""
    live, dirs = fleet.live, fleet.dirs
    fleet.h2.damage = False
    with Sanbox(live.url, live.key, timeout=60) as client:
        c = made_on_h1(client, "retried")
        snap = c.snapshot(name="retried")
        for _ in range(2):
            again = _sanbox(live, "snapshot", "move", "retried", "--idempotency-key", "k1")
            assert again.returncode == 0, again.stderr
            assert _snapshots_on(dirs, snap.id) == ["h2"], "moved again"
        keyed = ("--idempotency-key", "k1")
        other = _sanbox(live, "snapshot", "move", "retried", "--to", "h1", *keyed)
        assert other.returncode != 0 and len(other.stderr.strip().splitlines()) == 1, other.stderr
        assert "idempotency_conflict" in other.stderr or "new key" in other.stderr, other.stderr
        anew = _sanbox(live, "snapshot", "move", "retried", "--idempotency-key", "k2")
        assert anew.returncode == 0 and _snapshots_on(dirs, snap.id) == ["h1"], anew.stderr

        headers = {"Authorization": f"Bearer {live.key}", "Idempotency-Key": "c1"}
        where = f"{live.url}/v1/fleet/computers/{c.id}/move"
        answers = [httpx.post(where, json={}, headers=headers, timeout=60) for _ in range(2)]
        assert [r.status_code for r in answers] == [200, 200], [r.text for r in answers]
        assert answers[0].json() == answers[1].json()
        assert _on(dirs, c.id) == ["h2"], "moved again"
        moved = [e for e in c.events() if e.type == "computer.moved"]
        assert len(moved) == 1, moved
        client.snapshots.delete(snap.id)
        c.delete()
