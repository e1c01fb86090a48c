"""Warm pools through the real server: a pool of 2 hands out running computers (a create is a
claim: the computer takes the request's name and hostname, or, named by nobody, the name its
warm-up gave its guest; after a restart the claim sets it), refills, survives a `kill -9` of the
server with nothing leaked, shrinks when asked; and a member whose policy cannot be applied is
never handed out."""

from __future__ import annotations

import subprocess

import pytest

from sanbox import Sanbox
from sanbox.host.net import Network

from .conftest import cli, wait_for
from .server import ServerProcess

pytestmark = pytest.mark.vm


def pool(client: Sanbox) -> tuple[int, int, str]:
    found = [p for p in client.pools.list() if p.template == "base"]
    return (found[0].ready, found[0].starting, found[0].refill) if found else (0, 0, "none")


def members(server: ServerProcess, client: Sanbox) -> set[str]:
    """Computers on the host that no listing shows: the pool's."""
    listed = {c.id for c in client.computers.list()}
    return {p.name for p in server.data_dir.computers.iterdir()} - listed


def qemus(server: ServerProcess) -> list[str]:
    out = subprocess.run(
        ["pgrep", "-f", f"{server.data_dir.computers}/"], capture_output=True, text=True
    )
    return out.stdout.split()


def test_a_pool_hands_out_refills_survives_a_kill_and_shrinks(
    server: ServerProcess, client: Sanbox
) -> None:
    r = cli(server, "pool", "set", "base", "--size", "2")
    assert r.returncode == 0 and "pool base: size 2" in r.stdout, r.stdout + r.stderr
    wait_for(lambda: pool(client)[0] == 2, "2 ready members")
    assert pool(client)[2] == "full"
    before = members(server, client)
    assert len(before) == 2

    c = client.computers.create(template="base", name="pooled-a", labels={"k": "v"})
    assert c.id in before and c.state == "running" and c.labels == {"k": "v"}
    assert c.exec("hostname").stdout.strip() == "pooled-a"
    assert any(e.type == "computer.running" and "warm pool" in e.message for e in c.events())
    wait_for(lambda: pool(client)[0] == 2, "the pool refilled")
    assert c.id not in members(server, client)
    unnamed = client.computers.create(template="base")  # the name its warm-up set in its guest
    assert unnamed.exec("hostname").stdout.strip() == unnamed.name
    wait_for(lambda: pool(client)[0] == 2, "the pool refilled")

    server.kill9()
    server.start()
    wait_for(lambda: pool(client)[0] == 2, "2 ready members after the restart")
    assert len(members(server, client)) == 2 and client.computers.get("pooled-a").state == "running"
    assert len(qemus(server)) == 4  # two members, pooled-a and one more: none leaked or doubled
    after = client.computers.create(template="base")  # the restarted server sets its hostname
    assert after.id not in (c.id, unnamed.id)
    assert after.exec("hostname").stdout.strip() == after.name
    after.delete()
    unnamed.delete()

    r = cli(server, "pool", "set", "base", "--size", "0")
    assert r.returncode == 0, r.stderr
    wait_for(lambda: not members(server, client), "the pool emptied")
    ls = cli(server, "pool", "ls", "--json")
    assert '"ready": 0' in ls.stdout
    c.delete()
    assert qemus(server) == []


def test_a_member_whose_policy_cannot_be_applied_is_not_handed_out(
    server: ServerProcess, client: Sanbox
) -> None:
    client.pools.set("base", 1)
    wait_for(lambda: pool(client)[0] == 1, "1 ready member")
    (broken,) = members(server, client)
    network = Network(server.data_dir.computers, server.data_dir.tag)
    subprocess.run(["ip", "netns", "delete", network.netns(broken)], check=True)
    c = client.computers.create(template="base", name="not-broken", allow=["example.com"])
    assert c.id != broken and c.state == "running"
    assert not any("warm pool" in e.message for e in c.events())  # made the ordinary way
    assert broken not in {p.name for p in server.data_dir.computers.iterdir()}  # discarded
    client.pools.set("base", 0)
    wait_for(lambda: not members(server, client), "the pool emptied")
    c.delete()
