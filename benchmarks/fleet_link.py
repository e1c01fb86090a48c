"""What the fleet's link costs: a computer's create to its first exec, and an exec of `true`,
through a server's own (in-process) host against a fleet host reached over mutual TLS (a
`sanbox host serve` process on this machine, its own data dir, RAM dir and uid range), in one
run, with real guests. Medians and p90s, and the ratio remote / in-process.
Usage: python benchmarks/fleet_link.py [CREATES] [EXECS]   (default 5 and 50; the base image from
SANBOX_BENCH_DATA_DIR or the test data dir)"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
from _common import data_dir, summary

from sanbox import Sanbox
from sanbox.host.drivers.confine import FIRST_VM_UID, VM_UIDS

BIN = Path(sys.executable).parent / "sanbox"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def started(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            argv, env=env, stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True
        )


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def key_of(config: Path) -> str:
    for line in config.read_text().splitlines():
        if line.startswith("api_key"):
            return line.split('"')[1]
    raise SystemExit("no api_key in the client config")


def until(check: object, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)


def measure(client: Sanbox, creates: int, execs: int, tag: str) -> tuple[list[float], list[float]]:
    """Seconds from a create's request to its first exec's answer; seconds per exec of `true`."""
    first: list[float] = []
    for i in range(creates):
        t0 = time.perf_counter()
        c = client.computers.create(name=f"{tag}-{i}", allow=[], idle_timeout=0)
        c.exec("true")
        first.append(time.perf_counter() - t0)
        if i < creates - 1:
            c.delete()
    rtt = []
    for _ in range(execs):
        t0 = time.perf_counter()
        c.exec("true")
        rtt.append(time.perf_counter() - t0)
    c.delete()
    return first, rtt


def main() -> None:
    creates = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    execs = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    shared = data_dir()
    tag = secrets.token_hex(2)
    srv_root, host_root = shared.root / f"bench-fleet-{tag}", shared.root / f"bench-host-{tag}"
    ram = Path(f"/dev/shm/sanbox-bench-host-{tag}")
    for root in (srv_root, host_root):
        root.mkdir()
        (root / "images").symlink_to(shared.images)
    (srv_root / "host").symlink_to(shared.host)  # the acceleration probe, as the vm tier does
    ram.mkdir()
    port, host_port = free_port(), free_port()
    url, config = f"http://127.0.0.1:{port}", srv_root / "config.toml"
    env = {**os.environ, "SANBOX_CONFIG": str(config), "SANBOX_DISK_OVERCOMMIT": "16"}
    server = started(
        [
            str(BIN),
            "server",
            "--port",
            str(port),
            "--data-dir",
            str(srv_root),
            "--log-level",
            "warning",
        ],
        env,
        srv_root / "server.log",
    )
    agent: subprocess.Popen[bytes] | None = None
    try:
        until(lambda: answers(f"{url}/openapi.json") and config.exists(), "the server")
        key = key_of(config)
        cli_env = {**os.environ, "SANBOX_URL": url, "SANBOX_API_KEY": key}
        with Sanbox(url, key, timeout=600) as client:
            local = measure(client, creates, execs, "own")
            token = subprocess.run(
                [str(BIN), "host", "token", "--region", "eu-1"],
                env=cli_env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            subprocess.run(
                [
                    str(BIN),
                    "host",
                    "join",
                    "--server",
                    url,
                    "--token",
                    token,
                    "--name",
                    "h1",
                    "--region",
                    "eu-1",
                    "--address",
                    "127.0.0.1",
                    "--port",
                    str(host_port),
                    "--data-dir",
                    str(host_root),
                ],
                env=cli_env,
                capture_output=True,
                check=True,
            )
            uids = f"{FIRST_VM_UID + VM_UIDS - 4096}-{FIRST_VM_UID + VM_UIDS - 1}"
            host_env = {**os.environ, "SANBOX_RAM_DIR": str(ram), "SANBOX_VM_UIDS": uids}
            agent = started(
                [
                    str(BIN),
                    "host",
                    "serve",
                    "--data-dir",
                    str(host_root),
                    "--port",
                    str(host_port),
                    "--log-level",
                    "warning",
                ],
                host_env,
                host_root / "host.log",
            )
            until(lambda: any(h.layers for h in client.fleet.hosts()), "the host to report")
            remote = measure(client, creates, execs, "far")
    finally:
        for proc in (agent, server):
            if proc is not None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(60)
        for path in (srv_root, host_root, ram):
            shutil.rmtree(path, ignore_errors=True)
    print(f"fleet link, {creates} creates and {execs} execs each (QEMU, real guests)")
    for name, (first, rtt) in (("in-process host", local), ("fleet host over mTLS", remote)):
        print(summary(f"{name}: create to first exec", first))
        print(summary(f"{name}: exec true", rtt))
    for i, what in enumerate(("create to first exec", "exec true")):
        ratio = statistics.median(remote[i]) / statistics.median(local[i])
        extra = (statistics.median(remote[i]) - statistics.median(local[i])) * 1000
        print(f"remote / in-process, {what}: {ratio:.2f}x ({extra:+.1f} ms at the median)")


if __name__ == "__main__":
    main()
