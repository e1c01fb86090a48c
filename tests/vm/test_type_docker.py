"""The docker computer type through the types server and the CLI: the engine runs (overlay2,
cgroup v2), an image built FROM scratch with the type's static busybox runs on the default bridge,
Compose v1 runs it, a port a container publishes is reachable through Sanbox's port relay, and the
image outlasts a stop/start (a fresh boot on the same disk) and a pause/resume (a running
container too). A warm pool of the type hands out computers whose engine runs. Nothing is pulled:
no registry is reachable here."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest

from sanbox import Sanbox
from sanbox.sdk import Computer

from .conftest import build_type, claimed_from_pool, cli, wait_for
from .server import ServerProcess

pytestmark = [pytest.mark.vm, pytest.mark.timeout(3600)]

NAME = "docker-t"
IMAGE = "sanbox/busybox"
# busybox-static's /bin/busybox as the only file: it is every applet by the name it is run as
BUILD = f"""
set -e
rm -rf /root/bb && mkdir -p /root/bb && cp /bin/busybox /root/bb/busybox
cat > /root/bb/Dockerfile <<'EOF'
FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
CMD ["/bin/sh"]
EOF
docker build --network=none -t {IMAGE} /root/bb
"""
COMPOSE = f"""
set -e
mkdir -p /root/app && cd /root/app
cat > docker-compose.yml <<'EOF'
version: "3"
services:
  hello:
    image: {IMAGE}
    command: echo hello from compose
EOF
docker-compose up --no-color --abort-on-container-exit
docker-compose down
"""


def ok(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    r = cli(server, *args)
    assert r.returncode == 0, f"sanbox {' '.join(args)}: {r.stdout}{r.stderr}"
    return r


def sh(c: Computer, command: str, timeout: float = 300) -> str:
    r = c.exec(command, timeout=timeout)
    assert r.exit_code == 0, f"{command}: {r.stdout}{r.stderr}"
    return r.stdout.strip()


def engine_up(c: Computer) -> bool:
    return c.exec("docker info > /dev/null 2>&1", timeout=60).exit_code == 0


def services_log(c: Computer) -> str:
    return c.exec("tail -n 40 /var/log/sanbox/services/*.log", timeout=60).stdout


@pytest.fixture(scope="module")
def built(types_server: ServerProcess) -> str:
    started = time.monotonic()
    out = build_type(types_server, "docker")
    print(f"docker type ready in {time.monotonic() - started:.0f}s: {out[-300:]}")
    return "docker"


@pytest.fixture(scope="module")
def computer(types_server: ServerProcess, types_client: Sanbox, built: str) -> Iterator[Computer]:
    r = ok(types_server, "create", "--type", built, "--name", NAME)
    assert "start: restored" in r.stdout, r.stdout + r.stderr  # the engine came with the memory
    c = types_client.computers.get(NAME)
    yield c
    c.delete()


@pytest.fixture(scope="module")
def image(computer: Computer) -> str:
    sh(computer, BUILD, timeout=600)
    return IMAGE


def runs(c: Computer, image: str) -> None:
    """The image runs on the default bridge: an address of docker0's network, no way out."""
    out = sh(c, f"docker run --rm {image} sh -c 'echo hello from busybox; ip -4 addr show eth0'")
    assert out.startswith("hello from busybox") and "inet 172.17." in out, out


def test_the_engine_runs_with_overlay2_and_cgroup_v2(computer: Computer) -> None:
    assert engine_up(computer), services_log(computer)
    info = sh(computer, "docker info --format '{{.Driver}} {{.CgroupVersion}} {{.DockerRootDir}}'")
    assert info == "overlay2 2 /var/lib/docker", info
    assert "docker-compose version 1." in sh(computer, "docker-compose version")
    assert sh(computer, "/bin/busybox echo static") == "static"
    setup = sh(computer, "cat /var/log/sanbox/services/containerd.log")
    assert "sanbox-docker:" not in setup, setup  # every module loaded, every controller delegated


def test_an_image_built_from_scratch_runs_and_compose_runs_it(
    computer: Computer, image: str
) -> None:
    runs(computer, image)
    out = sh(computer, COMPOSE, timeout=600)
    assert "hello from compose" in out, out


def test_a_port_a_container_publishes_is_reachable_through_the_relay(
    types_server: ServerProcess, computer: Computer, image: str
) -> None:
    page = "mkdir /www && echo hello from a container > /www/index.html"
    sh(
        computer,
        f"docker run -d --name web -p 8080:8080 {image} "
        f"sh -c '{page} && exec httpd -f -p 8080 -h /www'",
    )
    try:
        fetch = "busybox wget -q -O - http://127.0.0.1:8080/index.html"
        wait_for(lambda: computer.exec(fetch, timeout=30).exit_code == 0, "the container's httpd")
        ok(types_server, "port", "publish", NAME, "8080")
        headers = {
            "Host": f"8080-{NAME}.localhost:{types_server.port}",
            "Authorization": f"Bearer {types_server.key}",
        }
        url = f"http://127.0.0.1:{types_server.port}/index.html"
        assert httpx.get(url, headers=headers, timeout=60).text == "hello from a container\n"
    finally:
        cli(types_server, "port", "unpublish", NAME, "8080")
        sh(computer, "docker rm -f web")


def test_the_image_outlasts_a_stop_and_a_start(
    types_server: ServerProcess, computer: Computer, image: str
) -> None:
    ok(types_server, "stop", NAME)
    r = ok(types_server, "start", NAME)
    assert "booted fresh" in r.stdout, r.stdout + r.stderr
    wait_for(lambda: engine_up(computer), "the engine after a fresh boot")
    assert image in sh(computer, "docker images --format '{{.Repository}}'")
    runs(computer, image)


def test_the_image_and_a_running_container_outlast_a_pause(
    types_server: ServerProcess, computer: Computer, image: str
) -> None:
    sh(computer, f"docker run -d --name sleeper {image} sleep 3600")
    ok(types_server, "pause", NAME)
    r = ok(types_server, "resume", NAME)
    assert "memory: restored" in r.stdout, r.stdout + r.stderr
    assert sh(computer, "docker ps --format '{{.Names}}'") == "sleeper"
    assert sh(computer, "docker exec sleeper echo still here") == "still here"
    sh(computer, "docker rm -f sleeper")
    runs(computer, image)


def test_a_warm_pool_of_the_type_hands_out_running_engines(
    types_server: ServerProcess, types_client: Sanbox, built: str
) -> None:
    with claimed_from_pool(types_server, types_client, built, "docker-pooled") as c:
        assert engine_up(c), services_log(c)
