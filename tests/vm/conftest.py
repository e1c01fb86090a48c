"""Booted computers shared by the vm tier, on a background event loop; all destroyed at the end,
and the tier checks that no VM process and no run socket is left behind."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from sanbox import Sanbox
from sanbox.host.data.layout import DataDir, default_ram_dir
from sanbox.host.drivers.qemu.accel import qemu_version
from sanbox.host.drivers.select import cached_driver
from sanbox.host.image import Image, find_image
from sanbox.host.net import Network
from sanbox.host.runtime import HostRuntime, Machine, MachineSpec
from sanbox.sdk import Computer

from ..conftest import vm_data_dir
from ..internet import Internet
from .server import BIN, ServerProcess

T = TypeVar("T")


class Loop:
    """An event loop in a thread: session fixtures and tests share agent connections on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 300.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture(scope="session")
def loop() -> Iterator[Loop]:
    lp = Loop()
    yield lp
    lp.close()


@pytest.fixture(scope="session")
def data_dir() -> DataDir:
    dd = vm_data_dir()
    dd.ensure()
    return dd


@pytest.fixture(scope="session")
def image(data_dir: DataDir) -> Image:
    return find_image(data_dir, "base")


def qemu_pids(data_dir: DataDir) -> list[int]:
    out = subprocess.run(["pgrep", "-f", str(data_dir.computers)], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


@pytest.fixture(scope="session")
def runtime(data_dir: DataDir, loop: Loop) -> Iterator[HostRuntime]:
    expected = os.environ.get("SANBOX_TEST_QEMU_VERSION")  # scripts/test's pass on QEMU 10
    if expected is not None:
        assert f"version {expected}." in qemu_version(), f"not QEMU {expected}: {qemu_version()}"
    rt = HostRuntime(data_dir)
    created: list[str] = []
    machines: list[Machine] = []
    rt.created = created  # type: ignore[attr-defined]
    rt.booted = machines  # type: ignore[attr-defined]
    yield rt
    for m in machines:
        loop.run(m.agent.close())
    for computer_id in created:
        loop.run(rt.destroy(computer_id))
    loop.run(rt.gc_layers())  # the data dir is shared by runs: none inherits another's layers
    leftover = [c for c in created if (data_dir.computers / c).exists()]
    sockets = list(data_dir.computers.glob("*/run/*.sock"))
    assert not leftover, f"computer folders left behind: {leftover}"
    assert not sockets, f"run sockets left behind: {sockets}"
    assert not qemu_pids(data_dir), "qemu processes left behind"
    assert not list(default_ram_dir().glob(f"sanbox-{data_dir.tag}-*")), "RAM files left behind"
    assert rt.network is None or not rt.network.namespaces(), "namespaces left behind"


def skip_unless_live_saves(data_dir: DataDir) -> None:
    """Skip, saying why, where this host's hypervisor does not save memory as the guest runs
    (QEMU before 9.0 under TCG: its snapshots stop the vCPUs; scripts/test runs these tests
    again on QEMU 10)."""
    driver = cached_driver(data_dir.host)
    if not driver.capabilities.live_memory_save:
        pytest.skip(f"{driver.isolation} on {qemu_version()} saves no memory live")


MakeMachine = Callable[..., Machine]


@pytest.fixture(scope="session")
def make_machine(runtime: HostRuntime, image: Image, loop: Loop) -> MakeMachine:
    def make(**kw: Any) -> Machine:
        computer_id = "vmt" + secrets.token_hex(4)
        runtime.created.append(computer_id)  # type: ignore[attr-defined]
        spec = MachineSpec(computer_id=computer_id, hostname=computer_id, **kw)
        machine, _disk = loop.run(runtime.create(spec, image))
        runtime.booted.append(machine)  # type: ignore[attr-defined]
        return machine

    return make


@pytest.fixture(scope="session")
def machine(make_machine: MakeMachine, runtime: HostRuntime) -> Machine:
    """One booted computer shared by most vm tests."""
    shared = make_machine(memory_mib=512)
    runtime.shared = shared.computer_id  # type: ignore[attr-defined]
    return shared


def _ending(request: pytest.FixtureRequest, uses_runtime: bool) -> Iterator[None]:
    """Yield once; then destroy what was made on the host runtime meanwhile (if it is used)."""
    if not uses_runtime:
        yield
        return
    runtime: HostRuntime = request.getfixturevalue("runtime")
    loop: Loop = request.getfixturevalue("loop")
    first = len(runtime.created)  # type: ignore[attr-defined]
    yield
    _end_since(runtime, loop, first)


def _end_since(runtime: HostRuntime, loop: Loop, first: int) -> None:
    """Destroy the computers made on the host runtime since `first` (not the shared one)."""
    ended = set(runtime.created[first:]) - {getattr(runtime, "shared", None)}  # type: ignore[attr-defined]
    for m in [m for m in runtime.booted if m.computer_id in ended]:  # type: ignore[attr-defined]
        loop.run(m.agent.close())
        runtime.booted.remove(m)  # type: ignore[attr-defined]
    for computer_id in ended:
        loop.run(runtime.destroy(computer_id))


@pytest.fixture(autouse=True)
def machines_end_with_their_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """The computers a test (or its function-scoped fixtures) boots on the host runtime are
    destroyed when it ends: set up after every module and session fixture, this counts only
    the test's own, so a module's shared computers stay for its other tests."""
    yield from _ending(request, "runtime" in request.fixturenames)


@pytest.fixture(scope="module", autouse=True)
def machines_end_with_their_module(request: pytest.FixtureRequest) -> Iterator[None]:
    """The computers a module boots on the host runtime (`make_machine`, beyond the shared
    `machine`) are destroyed when the module ends: an idle guest under TCG still takes CPU, and
    a session's worth of them would slow every test after."""
    mine = [
        i
        for i in request.session.items
        if isinstance(i, pytest.Function) and i.module is request.module
    ]
    yield from _ending(request, any("runtime" in i.fixturenames for i in mine))


@pytest.fixture
def run(loop: Loop) -> Callable[[Awaitable[T]], T]:
    def _run(aw: Awaitable[T], timeout: float = 300.0) -> T:
        async def wrap() -> T:
            return await aw

        return loop.run(wrap(), timeout)

    return _run


def server_env(internet: Internet) -> dict[str, str]:
    """The vm tier's servers resolve through the test internet and trust its CA upstream (the
    secret proxy's); they make many 8 GiB thin disks that stay almost empty: more than the free
    space of a small CI disk adds up to unless the operator lets them (test_admission.py)."""
    return {
        "SANBOX_UPSTREAM_DNS": internet.upstream_dns,
        "SANBOX_DISK_OVERCOMMIT": "16",
        "SANBOX_CA_BUNDLE": str(internet.ca),
    }


@pytest.fixture(scope="session")
def server(data_dir: DataDir, internet: Internet) -> Iterator[ServerProcess]:
    srv = ServerProcess(data_dir, "server-tests", server_env(internet))
    srv.start()
    yield srv
    with Sanbox(srv.url, srv.key, timeout=300) as client:
        for c in client.computers.list():
            c.delete()
    srv.stop()
    assert not list(srv.data_dir.computers.glob("*")), "computer folders left behind"
    assert not Network(srv.data_dir.computers, srv.data_dir.tag).namespaces(), "namespaces left"
    srv.remove()


@pytest.fixture(scope="session")
def types_server(data_dir: DataDir, internet: Internet) -> Iterator[ServerProcess]:
    """A server for the computer types, whose data dir outlives the session: the types it builds
    (minutes each under TCG) stay built, and the next session's build of an unchanged type is a
    no-op (a build is keyed by its spec's content and its base image). Its computers and pools
    go at the end; its templates and their layers stay."""
    srv = ServerProcess(data_dir, "types-server", server_env(internet))
    srv.start()
    yield srv
    with Sanbox(srv.url, srv.key, timeout=300) as client:
        for pool in client.pools.list():
            client.pools.set(pool.template, 0)
        for c in client.computers.list():
            c.delete()
    srv.stop()
    assert not Network(srv.data_dir.computers, srv.data_dir.tag).namespaces(), "namespaces left"


@pytest.fixture(scope="session")
def types_client(types_server: ServerProcess) -> Iterator[Sanbox]:
    with Sanbox(types_server.url, types_server.key, timeout=900) as c:
        yield c


def _build(server: ServerProcess, kind: str) -> str:
    r = cli(server, "template", "build", "--type", kind, "--quiet", timeout=3000)
    assert r.returncode == 0, f"building {kind}: {r.stdout}{r.stderr}"
    return r.stdout + r.stderr


class TypeBuilds:
    """The computer types a session's tests use, built one after the other in the background
    from the session's start: each takes minutes under TCG, on the second core while the other vm
    tests run on the first."""

    def __init__(self, server: ServerProcess, kinds: list[str]) -> None:
        self.server = server
        self.done: dict[str, str | BaseException] = {}
        self.cond = threading.Condition()
        threading.Thread(target=self._run, args=(kinds,), daemon=True).start()

    def _run(self, kinds: list[str]) -> None:
        for kind in kinds:
            try:
                out: str | BaseException = _build(self.server, kind)
            except BaseException as exc:  # said by the test that waits for it
                out = exc
            with self.cond:
                self.done[kind] = out
                self.cond.notify_all()
        builds_done()

    def wait(self, kind: str) -> str:
        with self.cond:
            self.cond.wait_for(lambda: kind in self.done, timeout=3600)
        result = self.done.get(kind)
        if result is None:
            raise AssertionError(f"the {kind} type was not built within an hour")
        if isinstance(result, BaseException):
            raise result
        return result


def builds_done() -> None:
    """Say that this session's builds ended (the second core is free from here on) by making
    the file $SANBOX_TEST_BUILDS_DONE names: scripts/test starts the sessions it runs beside this
    one then."""
    if flag := os.environ.get("SANBOX_TEST_BUILDS_DONE"):
        Path(flag).touch()


_BUILDS: dict[int, TypeBuilds] = {}


@pytest.fixture(scope="session", autouse=True)
def types_built_early(request: pytest.FixtureRequest) -> Iterator[None]:
    """Start building the types the selected (not skipped) tests use, at the session's start."""
    kinds = sorted(
        {
            m.group(1)
            for item in request.session.items
            if (m := re.search(r"test_type_(\w+)\.py$", str(item.path)))
            and not any(mark.name == "skip" for mark in item.iter_markers())
        }
    )
    if kinds:
        server = request.getfixturevalue("types_server")
        _BUILDS[id(server)] = TypeBuilds(server, kinds)
    else:
        builds_done()
    yield


def build_type(server: ServerProcess, kind: str) -> str:
    """Computer type `kind` built on `server` (a no-op when it is already); its build output."""
    builds = _BUILDS.get(id(server))
    return builds.wait(kind) if builds is not None else _build(server, kind)


@pytest.fixture(scope="session")
def client(server: ServerProcess) -> Iterator[Sanbox]:
    with Sanbox(server.url, server.key, timeout=600) as c:
        yield c


def cli(
    server: ServerProcess, *args: str, stdin: str | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """`sanbox ARGS` against `server`, as a user runs it."""
    env = {**os.environ, "SANBOX_URL": server.url, "SANBOX_API_KEY": server.key}
    return subprocess.run(
        [str(BIN), *args], env=env, input=stdin, capture_output=True, text=True, timeout=timeout
    )


def ok(server: ServerProcess, *args: str, stdin: str | None = None, timeout: float = 900) -> str:
    """`sanbox ARGS`, which must succeed; its standard output."""
    r = cli(server, *args, stdin=stdin, timeout=timeout)
    assert r.returncode == 0, f"sanbox {' '.join(args)}: {r.stdout}{r.stderr}"
    return r.stdout


def wait_for(check: Callable[[], bool], what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)


@contextlib.contextmanager
def claimed_from_pool(
    server: ServerProcess,
    client: Sanbox,
    kind: str,
    name: str,
) -> Iterator[Computer]:
    """A computer of type `kind` that `sanbox create --type` claimed from a warm pool of one,
    deleted after; the pool is emptied at once (its refill waits a second after a claim: no
    replacement is restored only to be thrown away)."""

    def ready() -> int:
        found = [p for p in client.pools.list() if p.template == kind]
        return found[0].ready if found else 0

    def members() -> int:  # ready or being made (a refill may start while a claim configures)
        found = [p for p in client.pools.list() if p.template == kind]
        return found[0].ready + found[0].starting if found else 0

    ok(server, "pool", "set", kind, "--size", "1")
    try:
        wait_for(lambda: ready() == 1, f"1 ready member of the {kind} pool", timeout=600)
        try:
            ok(server, "create", "--type", kind, "--name", name)
        finally:
            client.pools.set(kind, 0)
        c = client.computers.get(name)
        try:
            assert any("warm pool" in e.message for e in c.events()), c.events()
            assert c.exec("hostname", timeout=60).stdout.strip() == name
            yield c
        finally:
            c.delete()
    finally:
        ok(server, "pool", "set", kind, "--size", "0")
    wait_for(lambda: members() == 0, f"the {kind} pool emptied", timeout=600)


@contextlib.contextmanager
def immutable(path: Path) -> Iterator[None]:
    """`path` unchangeable for the block, even by root (`chattr +i`): nothing in it is written,
    made, renamed or unlinked."""
    subprocess.run(["chattr", "+i", str(path)], check=True)
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)
