"""Template requests that cannot be carried out are refused with a stable code before anything
is built or recorded: a spec error names its line, a hostile context is refused, a name or base
that does not exist is not found. (Builds themselves run real VMs: tests/vm/test_templates.py.)"""

from __future__ import annotations

import asyncio
import io
import tarfile

import pytest

from sanbox.control import build_cache
from sanbox.templates.context import MAX_BYTES

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
    return server.client.post("/v1/templates", content=body, params=params,
                              headers={**server.headers(), **TAR})  # fmt: skip


def listed(server: Server) -> list[str]:
    r = server.client.get("/v1/templates", headers=server.headers())
    assert r.status_code == 200, r.text
    return [t["name"] for t in r.json()["templates"]]


@pytest.mark.parametrize(
    ("files", "code", "words"),
    [
        ({"sanbox.toml": b'name = "t"\n\n[[steps]]\napt = []\n'}, "invalid_spec",
         "sanbox.toml:4"),
        ({"sanbox.toml": b"name = 3\n"}, "invalid_spec", "sanbox.toml:1"),
        ({"sanbox.toml": b"[[steps]]\nrun = 'true'\n"}, "invalid_spec", "name the template"),
        ({"notes.txt": b"x"}, "invalid_context", "no sanbox.toml"),
        ({"sanbox.toml": b'name = "t"\n[[steps]]\ncopy = "a"\nto = "/a"\n'}, "invalid_context",
         "does not hold"),
        ({"sanbox.toml": b'name = "base"\n'}, "name_taken", "built-in"),
        ({"sanbox.toml": b'name = "t"\nbase = "nothere"\n'}, "template_not_found", "nothere"),
        ({"sanbox.toml": b'name = "t"\nallow = ["cidr:127.0.0.1/32:80"]\n'}, "invalid_rule",
         "allow"),
    ],
)  # fmt: skip
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
    for method, path in [("GET", "/v1/templates/nope"), ("DELETE", "/v1/templates/nope"),
                         ("GET", "/v1/templates/nope/logs")]:  # fmt: skip
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
    monkeypatch.setattr(build_cache, "BUILDS", asyncio.Semaphore(0))  # as while a build runs
    r = server.client.post("/v1/build-cache/prune", headers=server.headers())
    assert error(r) == (409, "template_building")
    assert "when it is done" in r.json()["error"]["message"]
