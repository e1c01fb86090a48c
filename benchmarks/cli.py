"""What `sanbox` costs over the API call it makes. Each command runs as a user types it (a fresh
`python -c "from sanbox.cli.main import run; run()"` as the console script runs it, its wall
time) against a real API server (the component tier's: the real app and store, a local process
standing in for each VM, in a temporary directory), three times per round: as `sanbox` runs it
now; through `main` alone, the collector running while modules load and the interpreter's
teardown at the end (as before the console script was `run`); and through the whole typer app
as it did before (SANBOX_CLI_EAGER=1; for `exec`, `shell` and `ssh-proxy`, on their own fast
path, that is the typer app's command). The same API call is timed from a warm in-process SDK
client; a command's overhead is its wall time less the call's median, and the goal is <= 0.1 s.
`--help` prints what it kept the first time (sanbox.cli.help_cache): that first time is timed
too, with nothing kept. `ssh-proxy` relays to a stand-in sshd that echoes (the stand-in VMs' SSH
files are kept in the benchmark's folder, never this host's). Not timed: what this single
server refuses (`move`, `snapshot move`, `host get|drain|forget` need a fleet; `org create` a
new name each run).
Usage: python benchmarks/cli.py [N]"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from _common import summary

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT))
from tests.component.conftest import fake_image, served  # noqa: E402

from sanbox import Sanbox  # noqa: E402
from sanbox.api import ServerSettings, create_app  # noqa: E402
from sanbox.guest.ssh import ROOT_ENV  # noqa: E402
from sanbox.host.data.layout import DataDir  # noqa: E402
from sanbox.host.drivers.local import LocalDriver  # noqa: E402
from sanbox.host.runtime import HostRuntime  # noqa: E402
from sanbox.sdk import Computer, TemplateNotFoundError  # noqa: E402

ENTRY = "import sys; sys.argv[0] = 'sanbox'; from sanbox.cli.main import run; run()"
MAIN = "import sys; sys.argv[0] = 'sanbox'; from sanbox.cli.main import main; main()"
GOAL = 0.1


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]
    call: str  # the API call it makes, as the SDK makes it
    api: Callable[[], object] | None  # None: it makes none
    prepare: Callable[[], object] | None = None  # before each run, untimed (stop: start it)
    kept: bool = False  # its answer is kept (help): also timed with nothing kept yet
    stdin: bytes | None = None  # what it reads on standard input


def cases(client: Sanbox, tmp: Path) -> list[Case]:
    box = client.computers.get("bench")
    note, back, guest = tmp / "note.txt", tmp / "note.back", f"{tmp}/guest/note.txt"
    note.write_bytes(os.urandom(4096))

    def stop() -> object:
        return client.computers.get("cycled").stop()

    def start() -> object:
        return client.computers.get("cycled").start()

    def running() -> None:
        if client.computers.get("cycled").state != "running":
            start()

    def stopped() -> None:
        if client.computers.get("cycled").state != "stopped":
            stop()

    def reach(allow: bool) -> Callable[[], object]:
        """`net allow|deny bench example.com` as the SDK does it: four calls."""

        def change() -> object:
            computer = client.computers.get("bench")
            now = computer.allowlist()
            wanted = now + ["example.com"] if allow else [r for r in now if r != "example.com"]
            computer.set_allowlist(list(dict.fromkeys(wanted)))
            return computer.allowlist()

        return change

    def published() -> object:
        return client.computers.get("bench").publish(8080)

    def secret() -> object:
        return client.secrets.set("gone", "value", ["api.example.com"])

    def bound() -> object:
        return client.secrets.bind("token", "bench", env="TOKEN")

    def uploaded() -> object:
        return client.computers.get("bench").files.upload(note, guest)

    def downloaded() -> object:
        files = client.computers.get("bench").files
        files.stat(guest)
        return files.download(guest, back)

    def no_template() -> None:
        with contextlib.suppress(TemplateNotFoundError):
            client.templates.delete("ghost")

    client.secrets.set("token", "value", ["api.example.com"])
    revoked = client.keys.create(name="revoked").id
    published()
    return [
        Case(("ls",), "computers.list()", client.computers.list),
        Case(("ls", "--json"), "computers.list()", client.computers.list),
        Case(("get", "bench"), "computers.get()", lambda: client.computers.get("bench")),
        Case(("snapshot", "ls"), "snapshots.list()", client.snapshots.list),
        Case(("template", "ls"), "templates.list()", client.templates.list),
        Case(("net", "show", "bench"), "get(), allowlist()", lambda: box.allowlist()),
        Case(("exec", "bench", "--", "true"), "exec_stream(true)", lambda: _exec(box)),
        Case(("shell", "bench"), "exec_stream(pty shell), exit", lambda: _shell(box), stdin=EXIT),
        Case(("ssh-proxy", "bench"), "ssh_stream(), 2 bytes", lambda: _ssh(box), stdin=b"hi"),
        Case(("ssh-config", "bench"), "get(), authorize_ssh_key()", lambda: _ssh_key(client)),
        Case(("cp", str(note), f"bench:{guest}"), "get(), upload() (4 KiB)", uploaded),
        Case(("cp", f"bench:{guest}", str(back)), "get(), stat(), download()", downloaded),
        Case(("stop", "cycled"), "get(), stop()", stop, running),
        Case(("start", "cycled"), "get(), start()", start, stopped),
        Case(("key", "ls"), "keys.list()", client.keys.list),
        Case(("usage",), "usage.get()", lambda: client.usage.get(None, None, "computer")),
        Case(("usage", "--csv"), "usage.csv()", lambda: client.usage.csv(None, None, "computer")),
        Case(
            ("secret", "set", "token", "--host", "api.example.com", "--value-stdin"),
            "secrets.set() (a rotation)",
            lambda: client.secrets.set("token", "value", ["api.example.com"]),
            stdin=b"value\n",
        ),
        Case(
            ("update", "bench", "--idle-timeout", "600"),
            "get(), update()",
            lambda: client.computers.get("bench").update(idle_timeout=600),
        ),
        Case(("net", "allow", "bench", "example.com"), "get(), 3 network calls", reach(True)),
        Case(("net", "deny", "bench", "example.com"), "get(), 3 network calls", reach(False)),
        Case(("port", "publish", "bench", "8080"), "get(), publish()", published),
        Case(
            ("port", "unpublish", "bench", "8080"),
            "get(), unpublish()",
            lambda: client.computers.get("bench").unpublish(8080),
            published,
        ),
        Case(
            ("port", "view-link", "bench", "8080"),
            "get(), view_link()",
            lambda: client.computers.get("bench").view_link(8080),
            published,
        ),
        Case(
            ("pool", "set", "base", "-s", "0"), "pools.set()", lambda: client.pools.set("base", 0)
        ),
        Case(
            ("secret", "rm", "gone"),
            "secrets.delete()",
            lambda: client.secrets.delete("gone"),
            secret,
        ),
        Case(("secret", "bind", "token", "bench", "-e", "TOKEN"), "secrets.bind()", bound),
        Case(
            ("secret", "unbind", "token", "bench"),
            "secrets.unbind()",
            lambda: client.secrets.unbind("token", "bench"),
            bound,
        ),
        Case(
            ("secret", "bindings", "bench"),
            "secrets.bindings()",
            lambda: client.secrets.bindings("bench"),
        ),
        Case(
            ("key", "create", "--name", "k"), "keys.create()", lambda: client.keys.create(name="k")
        ),
        Case(("key", "revoke", revoked), "keys.revoke()", lambda: client.keys.revoke(revoked)),
        Case(("org", "quota", "default"), "orgs.quota()", lambda: client.orgs.quota("default")),
        Case(
            ("org", "regions", "default"), "orgs.regions()", lambda: client.orgs.regions("default")
        ),
        Case(("template", "rm", "-f", "ghost"), "templates.delete() (none)", no_template),
        Case(("template", "prune"), "templates.prune()", client.templates.prune),
        Case(("image", "prune"), "images.prune()", client.images.prune),
        Case(("audit", "-n", "20"), "audit.list()", lambda: client.audit.list(limit=20)),
        Case(("host", "ls"), "fleet.hosts()", client.fleet.hosts),
        Case(("host", "jobs"), "fleet.jobs()", client.fleet.jobs),
        Case(
            ("host", "token", "--region", "eu"),
            "fleet.join_token()",
            lambda: client.fleet.join_token("eu"),
        ),
        Case(("config", "show"), "(none)", None),
        Case(("config", "set", "--api-key", "sbk_unread"), "(none): writes the file", None),
        Case(("--help",), "(none) [typer]", None, kept=True),
    ]


def _exec(box: Computer) -> None:
    with box.exec_stream(["true"]) as stream:
        stream.wait()


def _ssh(box: Computer) -> None:
    with box.ssh_stream() as stream:  # a stand-in sshd that echoes (`server`)
        stream.send(b"hi")
        stream.send_eof()
        while stream.recv():
            pass


def _ssh_key(client: Sanbox) -> None:
    client.computers.get("bench").authorize_ssh_key(KEY)


KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGJiYmJiYmJiYmJiYmJiYmJiYmJiYmJiYmJiYmJiYmJi bench"
EXIT = b"exit\n"  # what `shell` is given on stdin: its login shell ends at once


def _shell(box: Computer) -> None:
    with box.exec_stream(None, pty=True) as stream:
        stream.send_stdin(EXIT)
        stream.wait()


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def sanbox(
    env: dict[str, str], args: tuple[str, ...], entry: str = ENTRY, stdin: bytes | None = None
) -> Callable[[], object]:
    def run() -> None:
        argv = [sys.executable, "-c", entry, *args]
        if stdin is None:
            proc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True)
        else:
            proc = subprocess.run(argv, env=env, input=stdin, capture_output=True)
        assert proc.returncode == 0, (args, proc.stderr.decode())

    return run


def rounds(n: int, fn: Callable[[], object], prepare: Callable[[], object] | None) -> list[float]:
    out = []
    for _ in range(n):
        if prepare is not None:
            prepare()
        out.append(timed(fn))
    return out


@contextlib.contextmanager
def server() -> Iterator[tuple[str, str]]:
    with tempfile.TemporaryDirectory(prefix="sanbox-bench-cli-") as tmp:
        # the stand-in VMs' SSH files (never this host's): an sshd that echoes (`ssh-proxy`)
        sshd = Path(tmp) / "ssh" / "usr" / "sbin" / "sshd"
        sshd.parent.mkdir(parents=True)
        sshd.write_text("#!/bin/sh\nexec cat\n")
        sshd.chmod(0o755)
        os.environ[ROOT_ENV] = str(Path(tmp) / "ssh")
        try:
            dd = DataDir(Path(tmp) / "data")
            dd.ensure()
            fake_image(dd)
            settings = ServerSettings(data_dir=dd.root, client_config=None, watch_interval=0.2)
            app = create_app(settings, HostRuntime(dd, LocalDriver(), networking=False))
            with served(app) as url:
                yield url, app.state.first_key
        finally:
            del os.environ[ROOT_ENV]


def environments(url: str, key: str, tmp: Path) -> tuple[dict[str, str], dict[str, str]]:
    """How `sanbox` runs now, and through the whole typer app. Bytecode is written (to `tmp`), as
    an installed package has it: compiling the sources on every run would be timed too."""
    now = {
        **os.environ,
        "SANBOX_URL": url,
        "SANBOX_API_KEY": key,
        "PYTHONPATH": str(ROOT / "src"),
        "SANBOX_CONFIG": str(tmp / "absent.toml"),
        "PYTHONPYCACHEPREFIX": str(tmp / "pyc"),
        "XDG_CACHE_HOME": str(tmp / "cache"),  # where help is kept (sanbox.cli.help_cache)
    }
    now.pop("PYTHONDONTWRITEBYTECODE", None)
    eager = {**now, "SANBOX_CLI_EAGER": "1"}
    for env in (now, eager):
        sanbox(env, ("ls",))()
    return now, eager


def report(case: Case, n: int, now: dict[str, str], eager: dict[str, str]) -> bool:
    """Time `case` both ways and print it; whether it meets the goal now."""
    api = rounds(n, case.api, case.prepare) if case.api else [0.0]
    cli: list[float] = []
    ended: list[float] = []
    old: list[float] = []
    for _ in range(n):  # interleaved: the host's load falls on all alike
        cli += rounds(1, sanbox(now, case.args, stdin=case.stdin), case.prepare)
        ended += rounds(1, sanbox(now, case.args, MAIN, case.stdin), case.prepare)
        old += rounds(1, sanbox(eager, case.args, stdin=case.stdin), case.prepare)
    call = statistics.median(api)
    print(f"\nsanbox {' '.join(case.args)}")
    print(summary(f"  API call: {case.call}", api))
    print(summary("  CLI, before (the whole typer app)", old))
    print(summary("  CLI, through main alone (ended by Python)", ended))
    print(summary("  CLI, now", cli))
    if case.kept:
        cache = Path(now["XDG_CACHE_HOME"])
        first = rounds(n, sanbox(now, case.args), lambda: shutil.rmtree(cache, ignore_errors=True))
        print(summary("  CLI, now, the first time (nothing kept)", first))
    print(summary("  overhead, before", [t - call for t in old]))
    print(summary("  overhead, through main alone", [t - call for t in ended]))
    print(summary("  overhead, now", [t - call for t in cli]))
    met = statistics.median(cli) - call <= GOAL
    print(f"  <= {GOAL} s over the API call: {'yes' if met else 'NO'}")
    return met


def main(n: int) -> None:
    with server() as (url, key), Sanbox(url, key) as client, tempfile.TemporaryDirectory() as tmp:
        for name in ("bench", "cycled"):
            client.computers.create(name=name)
        try:
            now, eager = environments(url, key, Path(tmp))
            floor = [
                timed(lambda: subprocess.run([sys.executable, "-c", "pass"])) for _ in range(n)
            ]
            print(f"{n} runs each; a command's overhead: its wall time less the API call's median")
            print(summary("python -c pass (the interpreter alone)", floor))
            measured = cases(client, Path(tmp))
            missed = [case for case in measured if not report(case, n, now, eager)]
        finally:
            for computer in client.computers.list():
                computer.delete()
    print(f"\nmet by {len(measured) - len(missed)} of {len(measured)} commands", end="")
    print(f"; not by: {', '.join(' '.join(c.args) for c in missed)}" if missed else "")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
