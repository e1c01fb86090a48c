"""Two regions, a host agent in each (real host agents over mutual TLS, on the local driver): an
org's computers run in its home region and never spill out of it; another region is one the org
must be allowed and ask for; a fork or a create from a snapshot into another region than its
data's is refused with nothing written; each computer shows its region."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sanbox import Sanbox
from sanbox.fleet.link.agent import HostAgent
from sanbox.fleet.link.pki import FleetCAs, host_identity
from sanbox.host.data.layout import DataDir
from sanbox.host.drivers.local import LocalDriver
from sanbox.host.runtime import HostRuntime
from sanbox.sdk.errors import SanboxError

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


@pytest.fixture
def fleet_server(short_tmp: Path) -> Iterator[LiveServer]:
    yield from serving_fleet(short_tmp, lease=4.0, lost_after=8.0)


def _refused(call: object, code: str) -> None:
    with pytest.raises(SanboxError) as caught:
        call()  # type: ignore[operator]
    assert caught.value.code == code, caught.value


def _files_naming(root: Path, ids: set[str]) -> list[Path]:
    return [p for p in root.rglob("*") if any(i in str(p) for i in ids)]


def test_computers_stay_in_their_region(fleet_server: LiveServer, short_tmp: Path) -> None:
    live = fleet_server
    eu_dir, us_dir = short_tmp / "eu", short_tmp / "us"
    ports = _free_port(), _free_port()
    join_host(live, eu_dir, ports[0], "h-eu", "eu-1")
    join_host(live, us_dir, ports[1], "h-us", "us-1")
    agents = []
    for d in (eu_dir, us_dir):
        fake_image(DataDir(d))
        agents.append(HostAgent(HostRuntime(DataDir(d), LocalDriver(), networking=False)))
    control = FleetCAs(live.data_dir.root / "fleet").control_identity()
    eu_me = host_identity(DataDir(eu_dir).host / "fleet")
    us_me = host_identity(DataDir(us_dir).host / "fleet")
    with (
        _serving(agents[0], ports[0], eu_me),
        _serving(agents[1], ports[1], us_me),
        Sanbox(live.url, live.key, timeout=60) as client,
    ):
        for port in ports:
            _wait_until_up(f"https://127.0.0.1:{port}", control)
        _until(
            "both hosts up with their builds",
            lambda: (
                all(h.state == "up" and h.layers for h in _hosts(live)) and len(_hosts(live)) == 2
            ),
        )
        org = client.orgs.list()[0].name
        shown = _sanbox(live, "org", "regions", org, "--home", "eu-1")
        assert shown.returncode == 0 and "home eu-1" in shown.stdout, shown.stderr
        assert client.orgs.regions(org).home == "eu-1"

        made = [client.computers.create(name=f"eu-{i}", idle_timeout=0) for i in range(20)]
        assert {c.region for c in made} == {"eu-1"}
        assert all((eu_dir / "computers" / c.id).is_dir() for c in made)
        eu_ids = {c.id for c in made}
        assert _files_naming(us_dir, eu_ids) == [], "a file of an eu-1 computer on the us-1 host"

        # another region: refused until the org may use it, then it runs there
        before = len(client.computers.list())
        _refused(lambda: client.computers.create(name="far", region="us-1"), "region_not_allowed")
        _refused(
            lambda: client.computers.create(name="bad", region="Not A Region"), "invalid_region"
        )
        client.orgs.set_regions(org, "eu-1", ["us-1"])
        far = client.computers.create(name="far", region="us-1", idle_timeout=0)
        assert far.region == "us-1" and (us_dir / "computers" / far.id).is_dir()
        assert len(client.computers.list()) == before + 1

        # a fork or a copy into a region other than its data's: refused, nothing written
        source = made[0]
        source.stop()
        snap = source.snapshot(name="eu-snap")
        events = len(source.events())
        eu_before, us_before = sorted(eu_dir.rglob("*")), sorted(us_dir.rglob("*"))
        _refused(lambda: source.fork(count=2, region="us-1"), "region_mismatch")
        _refused(
            lambda: client.computers.create(name="copy", from_snapshot=snap.id, region="us-1"),
            "region_mismatch",
        )
        assert len(client.computers.list()) == before + 1
        assert len(source.events()) == events
        assert sorted(eu_dir.rglob("*")) == eu_before and sorted(us_dir.rglob("*")) == us_before
        # in its own region, both work
        copy = client.computers.create(name="copy", from_snapshot=snap.id, region="eu-1")
        assert copy.region == "eu-1" and (eu_dir / "computers" / copy.id).is_dir()
        forked = source.fork(count=1, region="eu-1")
        assert [f.region for f in forked] == ["eu-1"]

        for c in [*made, far, copy, *forked]:
            c.delete()
        client.snapshots.delete(snap.id)
