"""Template requests that cannot be carried out are refused with a stable code before anything
is built or recorded: a spec error names its line, a hostile context is refused, a name or base
that does not exist is not found. (Builds themselves run real VMs: tests/vm/test_templates.py.)"""

from __future__ import annotations

import asyncio
import io
import stat
import tarfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from sanbox.control import build_cache, build_run, template_lookup, templates
from sanbox.control.build_slots import FairSlots
from sanbox.store.models import TemplateRow
from sanbox.templates import context_worker
from sanbox.templates.context import MAX_BYTES, pack, unpack

from .conftest import Server
from .test_api_computers import error

pytestmark = pytest.mark.component

TAR = {"Content-Type": "application/x-tar"}


def context(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def post(server: Server, body: bytes, name: str | None = None) -> object:
    params = {"name": name} if name else None
    return server.client.post(
        "/v1/templates", content=body, params=params, headers={**server.headers(), **TAR}
    )


def listed(server: Server) -> list[str]:
    r = server.client.get("/v1/templates", headers=server.headers())
    assert r.status_code == 200, r.text
    return [t["name"] for t in r.json()["templates"]]


@pytest.mark.parametrize(
    ("files", "code", "words"),
    [
        ({"sanbox.toml": b'name = "t"\n\n[[steps]]\napt = []\n'}, "invalid_spec", "sanbox.toml:4"),
        ({"sanbox.toml": b"name = 3\n"}, "invalid_spec", "sanbox.toml:1"),
        ({"sanbox.toml": b"[[steps]]\nrun = 'true'\n"}, "invalid_spec", "name the template"),
        ({"notes.txt": b"x"}, "invalid_context", "no sanbox.toml"),
        (
            {"sanbox.toml": b'name = "t"\n[[steps]]\ncopy = "a"\nto = "/a"\n'},
            "invalid_context",
            "does not hold",
        ),
        ({"sanbox.toml": b'name = "base"\n'}, "name_taken", "built-in"),
        ({"sanbox.toml": b'name = "t"\nbase = "nothere"\n'}, "template_not_found", "nothere"),
        (
            {"sanbox.toml": b'name = "t"\nallow = ["cidr:127.0.0.1/32:80"]\n'},
            "invalid_rule",
            "allow",
        ),
    ],
)
def test_bad_builds_are_refused_and_record_nothing(
    server: Server, files: dict[str, bytes], code: str, words: str
) -> None:
    r = post(server, context(files))
    assert error(r)[1] == code, r.text  # type: ignore[attr-defined]
    assert words in r.json()["error"]["message"]  # type: ignore[attr-defined]
    assert listed(server) == ["base"]
    assert not (server.data_dir.root / "templates").exists()


def test_a_context_that_is_not_a_tar_or_too_big_is_refused(server: Server) -> None:
    assert error(post(server, b"not a tar at all" * 64)) == (422, "invalid_context")
    huge = b"\0" * (MAX_BYTES + 2 * 1024 * 1024)
    assert error(post(server, huge)) == (413, "payload_too_large")
    assert listed(server) == ["base"]


def test_templates_of_nobody_are_not_found(server: Server) -> None:
    for method, path in [
        ("GET", "/v1/templates/nope"),
        ("DELETE", "/v1/templates/nope"),
        ("GET", "/v1/templates/nope/logs"),
    ]:
        r = server.client.request(method, path, headers=server.headers())
        assert error(r) == (404, "template_not_found"), (method, path)
    r = server.client.post("/v1/computers", json={"template": "nope"}, headers=server.headers())
    assert error(r) == (404, "template_not_found")
    assert "sanbox template build" in r.json()["error"]["message"]
    base = server.client.get("/v1/templates/base", headers=server.headers()).json()
    assert base["builtin"] and base["state"] == "ready"


def test_pruning_the_build_cache_answers_what_it_did_and_waits_for_no_build(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(What a prune removes and keeps, with real builds: tests/vm/test_templates.py.)"""
    r = server.client.post("/v1/build-cache/prune", headers=server.headers())
    assert r.status_code == 200, r.text
    assert r.json() == {"removed_steps": 0, "kept_steps": 0, "freed_bytes": 0}
    monkeypatch.setattr(build_cache, "BUILDS", FairSlots(0))  # as while a build runs
    r = server.client.post("/v1/build-cache/prune", headers=server.headers())
    assert error(r) == (409, "template_building")
    assert "when it is done" in r.json()["error"]["message"]


def pax_flood(count: int) -> bytes:
    """A small tar of PAX headers (each a long path), then the spec: headers tarfile folds away."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for i in range(count):
            info = tarfile.TarInfo(f"d{i}/" + "x" * 120)
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        spec = SPEC_OK.encode()
        info = tarfile.TarInfo("sanbox.toml")
        info.size = len(spec)
        tar.addfile(info, io.BytesIO(spec))
    return out.getvalue()


def gzip_bomb() -> bytes:
    """Under 100 KiB of gzip that unpacks to a tar of 200 MiB."""
    inner = io.BytesIO()
    with tarfile.open(fileobj=inner, mode="w") as tar:
        info = tarfile.TarInfo("sanbox.toml")
        info.size = len(SPEC_OK)
        tar.addfile(info, io.BytesIO(SPEC_OK.encode()))
    squeeze = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    body = squeeze.compress(inner.getvalue())
    chunk = b"\0" * (1 << 20)
    for _ in range(200):
        body += squeeze.compress(chunk)
    return body + squeeze.flush()


def directories(count: int) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for i in range(count):
            info = tarfile.TarInfo(f"d{i}")
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
    return out.getvalue()


SPEC_OK = 'name = "t"\n[[steps]]\nrun = "true"\n'


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (lambda: gzip_bomb(), "MiB of tar"),
        (lambda: pax_flood(2000), "tar headers"),
        (lambda: directories(100_000), "tar headers"),
    ],
)
def test_a_context_that_expands_past_the_bounds_is_refused_quickly(
    server: Server, body: Callable[[], bytes], words: str
) -> None:
    data = body()
    assert len(data) <= MAX_BYTES + 1024 * 1024
    t0 = time.monotonic()
    r = post(server, data)
    assert error(r) == (422, "invalid_context"), r.text  # type: ignore[attr-defined]
    assert words in r.json()["error"]["message"]  # type: ignore[attr-defined]
    assert time.monotonic() - t0 < context_worker.TIMEOUT
    assert listed(server) == ["base"]


def test_a_worker_past_its_time_is_killed_and_the_upload_refused(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(context_worker, "TIMEOUT", 0.001)
    r = post(server, context({"sanbox.toml": SPEC_OK.encode()}))
    assert error(r) == (422, "invalid_context"), r.text  # type: ignore[attr-defined]
    assert "bounds" in r.json()["error"]["message"]  # type: ignore[attr-defined]


def test_the_example_notes_context_is_read_by_the_worker() -> None:
    data, spec = pack(Path(__file__).parents[2] / "examples" / "templates" / "notes")
    ctx = asyncio.run(context_worker.unpack_bounded(data))
    assert ctx.spec == spec and ctx.files == unpack(data).files and ctx.files


def test_an_org_has_at_most_so_many_builds_queued_or_running(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(build_run, "BUILDS", FairSlots(0))  # builds wait in the queue
    for i in range(templates.MAX_BUILDS_PER_ORG):
        r = post(server, context({"sanbox.toml": SPEC_OK.encode()}), name=f"t{i}")
        assert r.status_code == 202, r.text  # type: ignore[attr-defined]
    r = post(server, context({"sanbox.toml": SPEC_OK.encode()}), name="one-more")
    assert error(r) == (429, "too_many_builds"), r.text  # type: ignore[attr-defined]
    assert "one-more" not in listed(server)


def test_a_rebuild_builds_again_from_the_context_the_server_kept(server: Server) -> None:
    """No upload: the last accepted build's context is kept (root's alone, and removed with the
    template); a template that has none is refused with what to do."""
    h = server.headers()
    missing = server.client.post("/v1/templates/nope/rebuild", headers=h)
    assert error(missing) == (404, "template_not_found")
    spec = b'name = "again"\n\n[[steps]]\nrun = "echo one"\n'
    first = server.client.post(
        "/v1/templates", content=context({"sanbox.toml": spec}), headers={**h, **TAR}
    )
    assert first.status_code == 202, first.text
    template_id = first.json()["template"]["id"]
    kept = server.data_dir.root / "templates" / f"{template_id}.context.tar"
    assert kept.read_bytes() == context({"sanbox.toml": spec})
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600  # the fetch user cannot read it by name
    deadline = time.monotonic() + 60  # the stand-in's build ends (failed: it has no monitor)
    while server.client.get("/v1/templates/again", headers=h).json()["state"] == "building":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    again = server.client.post("/v1/templates/again/rebuild", headers=h)
    assert again.status_code == 202, again.text
    assert again.json()["building"] is True and again.json()["template"]["id"] == template_id
    while server.client.get("/v1/templates/again", headers=h).json()["state"] == "building":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert server.client.delete("/v1/templates/again", headers=h).status_code == 200
    assert not kept.exists()
    kept.parent.mkdir(parents=True, exist_ok=True)
    second = server.client.post(
        "/v1/templates", content=context({"sanbox.toml": spec}), headers={**h, **TAR}
    )
    assert second.status_code == 202, second.text
    while server.client.get("/v1/templates/again", headers=h).json()["state"] == "building":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    (server.data_dir.root / "templates" / f"{second.json()['template']['id']}.context.tar").unlink()
    lost = server.client.post("/v1/templates/again/rebuild", headers=h)
    assert error(lost) == (409, "no_build_context"), lost.text
    assert "sanbox template build" in lost.json()["error"]["message"]


def test_a_build_past_the_contexts_in_flight_is_refused_before_its_body_is_read(
    server: Server,
) -> None:
    plane = server.client.app.state.computers  # type: ignore[attr-defined]
    plane.build_uploads.per_org = 0  # as if the org's share were taken by uploads in flight
    r = server.client.post("/v1/templates", content=b"x" * 1024, headers=server.headers())
    assert error(r) == (429, "too_many_builds"), r.text
    assert server.client.get("/v1/templates", headers=server.headers()).status_code == 200


def test_rebuilds_are_bounded_as_uploads_and_a_building_one_is_refused_unread(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rebuild reads the kept context whole and unpacks it, as an upload does: it takes a
    place among the org's contexts in flight, and one of a template that is being built is
    refused before its context is read (a tenant's hundreds of rebuilds at once held gigabytes,
    each waiting for an unpacking worker before the `building` check)."""
    monkeypatch.setattr(build_run, "BUILDS", FairSlots(0))  # builds wait in the queue
    h = server.headers()
    spec = b'name = "held"\n\n[[steps]]\nrun = "echo one"\n'
    made = server.client.post(
        "/v1/templates", content=context({"sanbox.toml": spec}), headers={**h, **TAR}
    )
    assert made.status_code == 202, made.text
    read: list[object] = []
    real = Path.read_bytes

    def counted(path: Path) -> bytes:
        if path.name.endswith(".context.tar"):
            read.append(path)
        return real(path)

    monkeypatch.setattr(Path, "read_bytes", counted)
    busy = server.client.post("/v1/templates/held/rebuild", headers=h)
    assert error(busy) == (409, "template_building"), busy.text
    assert read == [], "the context of a template being built was read"
    plane = server.client.app.state.computers  # type: ignore[attr-defined]
    plane.build_uploads.per_org = 0  # as if the org's share were taken by contexts in flight
    full = server.client.post("/v1/templates/held/rebuild", headers=h)
    assert error(full) == (429, "too_many_builds"), full.text
    assert read == []


def test_an_org_past_its_templates_is_refused_a_new_one_and_may_build_those_it_has(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each template keeps its build context (up to 64 MiB), log and package list in the
    server's home, failed ones too: an org has at most `max_templates` (a new name past them is
    refused 422 `too_many_templates`, nothing kept); one it has is built again as before."""
    monkeypatch.setattr(build_run, "BUILDS", FairSlots(0))  # builds wait in the queue
    plane = server.client.app.state.computers  # type: ignore[attr-defined]
    plane.max_templates = 1
    h = {**server.headers(), **TAR}
    spec = b'name = "first"\n\n[[steps]]\nrun = "echo one"\n'
    assert server.client.post("/v1/templates", content=context({"sanbox.toml": spec}), headers=h)
    second = context({"sanbox.toml": spec.replace(b"first", b"second")})
    refused = server.client.post("/v1/templates", content=second, headers=h)
    assert error(refused) == (422, "too_many_templates"), refused.text
    assert "sanbox template rm" in refused.json()["error"]["message"]
    assert "second" not in listed(server)
    assert len(list((server.data_dir.root / "templates").glob("*.context.tar"))) == 1
    again = server.client.post("/v1/templates", content=context({"sanbox.toml": spec}), headers=h)
    assert error(again) == (409, "template_building"), again.text  # its own: not refused for room


def test_a_delete_that_meets_a_build_queued_since_it_looked_is_refused_and_removes_nothing(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The delete read the template ready; a rebuild was queued before it removed anything (its
    host's snapshot delete took a while): the delete is refused `template_building`, the build's
    record and context stay. Before, the record went under the build, whose end failed."""
    monkeypatch.setattr(build_run, "BUILDS", FairSlots(0))  # builds wait in the queue
    h = server.headers()
    spec = b'name = "raced"\n\n[[steps]]\nrun = "echo one"\n'
    made = server.client.post(
        "/v1/templates", content=context({"sanbox.toml": spec}), headers={**h, **TAR}
    )
    assert made.status_code == 202, made.text
    template_id = made.json()["template"]["id"]
    db = server.client.app.state.db  # type: ignore[attr-defined]
    real_get = template_lookup.get  # templates.get, as templates imports it

    def as_it_was(*args: object, **kwargs: object) -> object:
        row = real_get(*args, **kwargs)  # type: ignore[arg-type]
        row.state = "ready"  # what the delete saw before the build was queued
        return row

    monkeypatch.setattr(templates, "get", as_it_was)
    r = server.client.delete("/v1/templates/raced", headers=h)
    assert error(r) == (409, "template_building"), r.text
    with db.session() as s:
        assert s.get(TemplateRow, template_id) is not None, "the building template's record went"
    kept = server.data_dir.root / "templates" / f"{template_id}.context.tar"
    assert kept.exists(), "the building template's context went"
