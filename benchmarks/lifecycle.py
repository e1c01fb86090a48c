"""Lifecycle through the API against the layers under it, in one run:
- create to first exec through the API, against a bare boot of the same image by the driver;
- exec round trip of `true` through the API, against through the agent client;
- GET /v1/computers latency with 1,000 computers in the store.
Usage: python benchmarks/lifecycle.py [N]"""

from __future__ import annotations

import asyncio
import secrets
import statistics
import sys
import time
from pathlib import Path

import httpx
from _common import computer, data_dir, image, summary

sys.path.insert(0, str(Path(__file__).parents[1]))
from tests.vm.server import ServerProcess  # noqa: E402

from sanbox.host.runtime import HostRuntime  # noqa: E402
from sanbox.store import ComputerRow, Database, repo  # noqa: E402


def api_create_to_exec(client: httpx.Client, n: int) -> list[float]:
    times = []
    for _ in range(n):
        name = "bench-" + secrets.token_hex(3)
        t0 = time.perf_counter()
        r = client.post("/v1/computers", json={"name": name})
        r.raise_for_status()
        client.post(f"/v1/computers/{name}/exec", json={"cmd": ["true"]}).raise_for_status()
        times.append(time.perf_counter() - t0)
        client.delete(f"/v1/computers/{name}").raise_for_status()
    return times


async def bare_boots(n: int) -> list[float]:
    dd = data_dir()
    rt = HostRuntime(dd)
    img = image(dd)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        async with computer(rt, img) as m:
            await m.agent.exec(["true"])
            times.append(time.perf_counter() - t0)
    return times


async def agent_execs(n: int) -> list[float]:
    dd = data_dir()
    rt = HostRuntime(dd)
    async with computer(rt, image(dd)) as m:
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            await m.agent.exec(["true"])
            times.append(time.perf_counter() - t0)
    return times


def fill_store(db_path: Path, org_name: str, count: int) -> None:
    db = Database(f"sqlite:///{db_path}")
    with db.session() as s:
        org = repo.org_by_name(s, org_name)
        assert org is not None
        for i in range(count):
            s.add(
                ComputerRow(
                    id=repo.new_id("cmp_"),
                    org_id=org.id,
                    name=f"filler-{i}",
                    template="base",
                    state="stopped",
                    vcpus=1,
                    memory_mib=512,
                    disk_gib=8,
                    env={},
                    labels={"filler": "yes"},
                    hypervisor="qemu",
                    isolation="qemu-tcg",
                )
            )
    db.close()


def ratio(a: list[float], b: list[float]) -> str:
    return f"{statistics.median(a) / statistics.median(b):.2f}x"


def main(n: int) -> None:
    server = ServerProcess(data_dir(), "bench-server")
    server.start()
    try:
        headers = {"Authorization": f"Bearer {server.key}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=300) as client:
            print(f"server at {server.url}; {n} creates, 200 execs, 1,000 listed computers")
            api = api_create_to_exec(client, n)
            bare = asyncio.run(bare_boots(n))
            print(summary("create -> first exec, through the API", api, "s"))
            print(summary("boot -> first exec, bare driver + agent", bare, "s"))
            print(f"{'ratio API / bare':<44} {ratio(api, bare)}")
            name = "bench-exec"
            client.post("/v1/computers", json={"name": name}).raise_for_status()
            api_exec = []
            for _ in range(200):
                t0 = time.perf_counter()
                client.post(f"/v1/computers/{name}/exec", json={"cmd": ["true"]}).raise_for_status()
                api_exec.append(time.perf_counter() - t0)
            client.delete(f"/v1/computers/{name}").raise_for_status()
            agent = asyncio.run(agent_execs(200))
            print(summary("exec `true`, through the API", api_exec))
            print(summary("exec `true`, through the agent client", agent))
            print(f"{'ratio API / agent':<44} {ratio(api_exec, agent)}")
            fill_store(server.data_dir.root / "sanbox.db", "default", 1000)
            lists = []
            for _ in range(50):
                t0 = time.perf_counter()
                r = client.get("/v1/computers")
                r.raise_for_status()
                lists.append(time.perf_counter() - t0)
            assert len(r.json()["computers"]) >= 1000
            print(summary("GET /v1/computers (1,000 computers)", lists))
    finally:
        server.stop()
        import shutil

        shutil.rmtree(server.data_dir.root, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
