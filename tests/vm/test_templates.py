"""Templates built from a spec through the real server and CLI, on real guests: the example spec
(an apt package, a pip package, a copied file, a run step, a service, a readiness port) builds
with progress, builds again as a no-op, reuses its earlier layers when its last step changes,
and its computers restore the ready snapshot, each as itself. A failing build leaves its log
and nothing else."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sanbox import Sanbox
from sanbox.sdk import Computer

from .conftest import cli
from .server import ServerProcess

pytestmark = pytest.mark.vm

EXAMPLE = Path(__file__).parents[2] / "examples" / "templates" / "notes"


def ok(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    r = cli(server, *args)
    assert r.returncode == 0, f"sanbox {' '.join(args)}: {r.stdout}{r.stderr}"
    return r


def sh(c: Computer, command: str) -> str:
    r = c.exec(command, timeout=120)
    assert r.exit_code == 0, f"{command}: {r.stdout}{r.stderr}"
    return r.stdout.strip()


@pytest.fixture(scope="module")
def spec_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("notes") / "notes"
    shutil.copytree(EXAMPLE, folder)
    return folder


@pytest.fixture(scope="module")
def built(server: ServerProcess, client: Sanbox, spec_dir: Path) -> Iterator[str]:
    r = ok(server, "template", "build", str(spec_dir))
    out = r.stdout + r.stderr
    assert "step 1/5" in out and "apt install jq" in out, out
    assert "template notes built: 5 step(s), 0 reused" in r.stdout, out
    assert "ready snapshot" in r.stdout
    # what the built disk holds, by version, kept and logged (a moved archive shows as a change)
    assert "[sanbox] packages: " in out and " apt" in out, out
    record = (
        server.data_dir.root / "templates" / f"{client.templates.get('notes').id}.packages.json"
    )
    packages = json.loads(record.read_text())
    assert packages["apt:jq"] and packages["pip:cowsay"], sorted(packages)[:20]
    yield "notes"
    for c in client.computers.list():
        if c.template == "notes":
            c.delete()
    cli(server, "template", "rm", "-f", "notes")


def test_the_example_builds_then_builds_again_as_a_no_op(
    server: ServerProcess, client: Sanbox, built: str, spec_dir: Path
) -> None:
    t = client.templates.get(built)
    assert t.state == "ready" and t.ready_snapshot and t.ports == [8080]
    r = ok(server, "template", "build", str(spec_dir))
    assert "is up to date: nothing to build" in r.stdout
    listed = json.loads(ok(server, "template", "ls", "--json").stdout)
    assert [x["name"] for x in listed] == ["base", "notes"]
    assert not [p for p in server.data_dir.computers.iterdir() if p.name.startswith("bld-")]


def test_computers_of_it_restore_the_ready_snapshot_each_as_itself(
    server: ServerProcess, client: Sanbox, built: str
) -> None:
    r = ok(server, "create", "--template", built, "--name", "notes-a")
    assert "start: restored" in r.stdout, r.stdout + r.stderr
    a, b = client.computers.get("notes-a"), client.computers.create(template=built, name="notes-b")
    assert b.memory == "restored"
    for c in (a, b):
        assert sh(c, "cat /srv/notes/notes.txt").startswith("Notes")
        assert sh(c, "jq -r .built /srv/notes/built.json") != "null"
        assert sh(c, "python3 -c 'import cowsay; print(cowsay.__name__)'") == "cowsay"
        fetch = (
            "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8080/notes.txt')"
            ".read().decode())"
        )
        page = sh(c, f'python3 -c "{fetch}"')
        assert page.startswith("Notes")  # the service runs, restored with the memory
        assert sh(c, "echo $NOTES_DIR") == "/srv/notes"
        assert [p["port"] for p in c.record.ports] == [8080]
    ids = [(sh(c, "hostname"), sh(c, "cat /etc/machine-id")) for c in (a, b)]
    assert ids[0][0] == "notes-a" and ids[1][0] == "notes-b" and ids[0][1] != ids[1][1]
    keys = tmp_key(server)
    assert a.authorize_ssh_key(keys).host_key != b.authorize_ssh_key(keys).host_key
    bigger = client.computers.create(template=built, name="notes-c", memory_mib=768)
    assert bigger.memory == "lost" and "768" in (bigger.memory_reason or "")
    assert sh(bigger, "cat /srv/notes/notes.txt").startswith("Notes")  # booted on its disk
    wider = client.computers.create(template=built, name="notes-d", disk_gib=12)
    assert wider.memory == "restored" and wider.disk_gib == 12  # restored, then grown live
    assert int(sh(wider, "df -BG --output=size / | tail -1").strip().rstrip("G")) >= 11
    # a snapshot of one of them makes computers of the template too
    snap = a.snapshot(memory=True, name="notes-snap")
    again = client.computers.create(from_snapshot="notes-snap", name="notes-e")
    assert again.template == built and again.memory == "restored", again.record
    assert sh(again, "cat /srv/notes/notes.txt").startswith("Notes")
    (forked,) = a.fork()
    for c in (again, forked):  # the template's port, published as on every computer of it
        assert [p["port"] for p in c.record.ports] == [8080], c.record.ports
    for c in (a, b, bigger, wider, again, forked):
        c.delete()
    client.snapshots.delete(snap.id)


def tmp_key(server: ServerProcess) -> str:
    key = server.data_dir.root / "test_ed25519"
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return key.with_suffix(".pub").read_text().strip()


def test_a_changed_last_step_reuses_the_layers_before_it(
    server: ServerProcess, client: Sanbox, built: str, spec_dir: Path
) -> None:
    spec = spec_dir / "sanbox.toml"
    spec.write_text(spec.read_text().replace("{built: now}", "{built: now, version: 2}"))
    r = ok(server, "template", "build", str(spec_dir))
    assert "3 reused" in r.stdout, r.stdout + r.stderr
    log = ok(server, "template", "logs", built).stdout
    for n in (1, 2, 3):
        assert f"step {n}/5" in log and log.count("(cached)") == 3, log
    c = client.computers.create(template=built, name="notes-v2")
    assert sh(c, "jq -r .version /srv/notes/built.json") == "2"
    c.delete()


def test_prune_drops_the_steps_no_template_stands_on(
    server: ServerProcess, client: Sanbox, built: str, spec_dir: Path
) -> None:
    """After the change above, the first version's last steps stand under no template: they go,
    and every step of the current version stays (a copy of it builds with all its steps
    reused). Other tests' removed templates leave steps too: they go as well."""
    r = ok(server, "template", "prune")
    first = client.templates.prune()  # what the CLI did is done: nothing more to remove
    assert (first.removed_steps, first.freed_bytes) == (0, 0), first
    assert first.kept_steps >= 5
    removed = int(r.stdout.split("removed ")[1].split()[0])
    assert removed >= 2 and ("MiB freed" in r.stdout or "GiB freed" in r.stdout), r.stdout
    c = client.computers.create(template=built, name="notes-pruned")  # its layers are all there
    assert sh(c, "jq -r .version /srv/notes/built.json") == "2"
    c.delete()
    r = ok(server, "template", "build", str(spec_dir), "--name", "notes-copy")
    assert "5 step(s), 5 reused" in r.stdout, r.stdout + r.stderr
    ok(server, "template", "rm", "notes-copy")
    assert client.templates.prune().removed_steps == 0  # its steps are notes' own


def test_a_failing_build_leaves_its_log_and_nothing_else(
    server: ServerProcess, client: Sanbox, tmp_path: Path
) -> None:
    # `cat` reads the step's input: it ends at once (an open stdin held the step until its timeout)
    (tmp_path / "sanbox.toml").write_text(
        'name = "broken"\n[[steps]]\nrun = "cat; echo about to fail; exit 3"\n'
    )
    before = {s.id for s in client.snapshots.list()}
    r = cli(server, "template", "build", str(tmp_path))
    assert r.returncode != 0 and "exit code 3" in r.stderr, r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()[-1:]) == 1
    t = client.templates.get("broken")
    assert t.state == "failed" and "exit code 3" in (t.error or "")
    # listed as failed, with its reason, the same way by the SDK, the API and the CLI
    assert [(x.state, x.error) for x in client.templates.list() if x.name == "broken"] == [
        ("failed", t.error)
    ]
    listed = json.loads(ok(server, "template", "ls", "--json").stdout)
    assert [(x["state"], x["error"]) for x in listed if x["name"] == "broken"] == [
        ("failed", t.error)
    ]
    assert "failed" in ok(server, "template", "ls").stdout
    log = ok(server, "template", "logs", "broken").stdout
    assert "about to fail" in log and "build failed" in log
    r = cli(server, "create", "--template", "broken")
    assert r.returncode != 0 and "template_building" in r.stderr
    assert {s.id for s in client.snapshots.list()} == before
    assert not [p for p in server.data_dir.computers.iterdir() if p.name.startswith("bld-")]
    ok(server, "template", "rm", "broken")
