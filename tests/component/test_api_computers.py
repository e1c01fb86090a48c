import logging
import time
from pathlib import Path

import pytest

from sanbox.host.data.layout import DataDir

from .conftest import Server, fake_image, start_server

pytestmark = pytest.mark.component


def create(server: Server, **body: object) -> dict[str, object]:
    r = server.client.post("/v1/computers", json=body, headers=server.headers())
    assert r.status_code == 201, r.text
    data: dict[str, object] = r.json()
    return data


def error(r: object) -> tuple[int, str]:
    resp = r  # httpx.Response
    return resp.status_code, resp.json()["error"]["code"]  # type: ignore[attr-defined]


def test_first_start_writes_a_client_config(server: Server) -> None:
    text = server.settings.client_config.read_text()  # type: ignore[union-attr]
    assert f'api_key = "{server.key}"' in text and 'url = "http://127.0.0.1:7070"' in text
    assert server.settings.client_config.stat().st_mode & 0o077 == 0  # type: ignore[union-attr]


def test_first_start_keeps_a_client_config_that_is_there(
    short_tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A config for another server (its key shown once) is kept; the new key goes beside it
    and the log says where and how to use it."""
    other = 'url = "https://elsewhere.example"\napi_key = "sbk_the_only_copy"\n'
    (short_tmp / "config.toml").write_text(other)
    fake_image(DataDir(short_tmp / "data"))
    client, settings, _ = start_server(short_tmp)
    with caplog.at_level(logging.WARNING, logger="sanbox.api.bootstrap"), client:
        key = client.app.state.first_key  # type: ignore[attr-defined]
    assert (short_tmp / "config.toml").read_text() == other
    beside = short_tmp / "config-127.0.0.1-7070.toml"
    assert f'api_key = "{key}"' in beside.read_text()
    assert f"use it with SANBOX_CONFIG={beside}" in caplog.text


def test_health_answers_without_a_key_and_says_nothing_else(server: Server) -> None:
    r = server.client.get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    assert "/healthz" not in server.client.get("/openapi.json").json()["paths"]


def test_create_exec_stop_start_delete(server: Server) -> None:
    c = create(server, name="demo", labels={"team": "a"})
    assert c["state"] == "running" and c["isolation"] == "local-process" and c["disk_gib"] == 1
    h = server.headers()
    r = server.client.post("/v1/computers/demo/exec", json={"cmd": ["echo", "hi"]}, headers=h)
    assert r.json() == {
        "exit_code": 0,
        "stdout": "hi\n",
        "stderr": "",
        "signal": None,
        "timed_out": False,
        "stdout_truncated": False,
        "stderr_truncated": False,
    }
    r = server.client.post(
        "/v1/computers/demo/exec", json={"cmd": "cat; exit 3", "stdin": "x"}, headers=h
    )
    assert (r.json()["stdout"], r.json()["exit_code"]) == ("x", 3)
    r = server.client.post("/v1/computers/demo/exec", json={"cmd": ["no-such-prog"]}, headers=h)
    assert r.json()["exit_code"] == 127 and "no-such-prog" in r.json()["stderr"]
    assert (
        server.client.get("/v1/computers?label=team=a", headers=h).json()["computers"][0]["name"]
        == "demo"
    )
    assert server.client.get("/v1/computers?label=team=b", headers=h).json()["computers"] == []
    assert server.client.post("/v1/computers/demo/stop", headers=h).json()["state"] == "stopped"
    r = server.client.post("/v1/computers/demo/exec", json={"cmd": ["true"]}, headers=h)
    assert error(r) == (409, "computer_not_running")
    assert server.client.post("/v1/computers/demo/start", headers=h).json()["state"] == "running"
    events = server.client.get("/v1/computers/demo/events", headers=h).json()["events"]
    types = [e["type"] for e in events]
    assert types[:2] == ["computer.creating", "computer.running"]
    assert "computer.stopped" in types and types[-1] == "computer.running"
    cid = c["id"]
    r = server.client.delete("/v1/computers/demo", headers=h)
    assert r.json()["state"] == "deleted"
    assert not (server.data_dir.computers / str(cid)).exists()
    assert error(server.client.get("/v1/computers/demo", headers=h)) == (404, "computer_not_found")


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"template": "nope"}, 404, "template_not_found"),
        ({"name": "Bad_Name"}, 422, "invalid_name"),
        ({"name": "-x"}, 422, "invalid_name"),
        ({"vcpus": 64}, 422, "insufficient_resources"),
        ({"memory_mib": 1024 * 1024}, 422, "insufficient_resources"),
        ({"vcpus": 0}, 422, "validation_error"),
        ({"unknown": 1}, 422, "validation_error"),
    ],
)
def test_bad_create_requests_create_nothing(
    server: Server, body: dict[str, object], status: int, code: str
) -> None:
    r = server.client.post("/v1/computers", json=body, headers=server.headers())
    assert error(r) == (status, code), r.text
    assert r.json()["error"]["message"]
    assert server.client.get("/v1/computers", headers=server.headers()).json()["computers"] == []
    assert server.data_dir.computer_ids() == []


def test_disk_smaller_than_the_image(server: Server) -> None:
    # the test image is 1 GiB; make it 2 GiB to ask for less
    image = next((server.data_dir.images / "base").iterdir()) / "rootfs.raw"
    with open(image, "r+b") as f:
        f.truncate(2 * 1024**3)
    r = server.client.post("/v1/computers", json={"disk_gib": 1}, headers=server.headers())
    assert error(r) == (422, "disk_too_small")
    assert server.data_dir.computer_ids() == []


def test_duplicate_name_and_malformed_json(server: Server) -> None:
    create(server, name="twin")
    r = server.client.post("/v1/computers", json={"name": "twin"}, headers=server.headers())
    assert error(r) == (409, "name_taken")
    r = server.client.post(
        "/v1/computers",
        content=b"{not json",
        headers={**server.headers(), "Content-Type": "application/json"},
    )
    assert error(r) == (422, "validation_error")
    assert (
        len(server.client.get("/v1/computers", headers=server.headers()).json()["computers"]) == 1
    )


def test_keys_and_orgs(server: Server) -> None:
    assert error(server.client.get("/v1/computers")) == (401, "unauthorized")
    assert error(server.client.get("/v1/computers", headers=server.headers("sbk_wrong"))) == (
        401,
        "unauthorized",
    )
    create(server, name="mine")
    h = server.headers()
    assert server.client.post("/v1/orgs", json={"name": "other"}, headers=h).status_code == 201
    other = server.client.post("/v1/keys", json={"org": "other"}, headers=h).json()["key"]
    oh = server.headers(other)
    assert server.client.get("/v1/computers", headers=oh).json()["computers"] == []
    assert error(server.client.get("/v1/computers/mine", headers=oh)) == (404, "computer_not_found")
    r = server.client.post("/v1/computers/mine/exec", json={"cmd": ["true"]}, headers=oh)
    assert error(r) == (404, "computer_not_found")
    assert error(server.client.post("/v1/orgs", json={"name": "x"}, headers=oh)) == (
        403,
        "forbidden",
    )


def test_idempotent_create(server: Server) -> None:
    h = {**server.headers(), "Idempotency-Key": "abc"}
    a = server.client.post("/v1/computers", json={"name": "idem"}, headers=h).json()
    b = server.client.post("/v1/computers", json={"name": "idem"}, headers=h).json()
    assert a["id"] == b["id"]
    r = server.client.post("/v1/computers", json={"name": "other"}, headers=h)
    assert error(r) == (409, "idempotency_conflict")


def test_files_roundtrip_and_bad_paths(server: Server, short_tmp: object) -> None:
    create(server, name="files")
    h = server.headers()
    base = f"{short_tmp}/guestfs"
    r = server.client.put(
        f"/v1/computers/files/files?path={base}/a/b.txt", content=b"hello", headers=h
    )
    assert r.json() == {"path": f"{base}/a/b.txt", "size": 5}
    assert (
        server.client.get(f"/v1/computers/files/files?path={base}/a/b.txt", headers=h).content
        == b"hello"
    )
    names = server.client.get(f"/v1/computers/files/files/list?path={base}/a", headers=h).json()
    assert [e["name"] for e in names["entries"]] == ["b.txt"]
    r = server.client.get(f"/v1/computers/files/files?path={base}/../etc/passwd", headers=h)
    assert error(r) == (422, "invalid_path")
    r = server.client.get(f"/v1/computers/files/files?path={base}/missing", headers=h)
    assert error(r) == (404, "not_found")


def test_a_dead_vm_is_recorded_as_stopped(server: Server) -> None:
    import os
    import signal

    c = create(server, name="victim")
    pid = int((server.data_dir.computers / str(c["id"]) / "run" / "vm.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    for _ in range(50):
        state = server.client.get("/v1/computers/victim", headers=server.headers()).json()["state"]
        if state == "stopped":
            break
        time.sleep(0.1)
    assert state == "stopped"
    events = server.client.get("/v1/computers/victim/events", headers=server.headers()).json()
    assert events["events"][-1]["type"] == "computer.vm_exited"


def test_pause_resume_and_idle_timeout_bad_input(server: Server) -> None:
    h = server.headers()
    create(server, name="rest", idle_timeout=0)
    r = server.client.post("/v1/computers/rest/resume", headers=h)
    assert error(r) == (409, "invalid_transition") and "not paused" in r.json()["error"]["message"]
    for bad in (-1, "soon", 1.5):
        r = server.client.patch("/v1/computers/rest", json={"idle_timeout": bad}, headers=h)
        assert error(r) == (422, "validation_error"), bad
        r = server.client.post("/v1/computers", json={"idle_timeout": bad}, headers=h)
        assert error(r) == (422, "validation_error"), bad
    got = server.client.get("/v1/computers/rest", headers=h).json()
    assert (got["state"], got["idle_timeout"]) == ("running", 0)
    r = server.client.patch("/v1/computers/rest", json={"idle_timeout": 60}, headers=h)
    assert r.json()["idle_timeout"] == 60
    server.client.post("/v1/computers/rest/stop", headers=h)
    r = server.client.post("/v1/computers/rest/pause", headers=h)
    assert (
        error(r) == (409, "invalid_transition") and "only a running" in r.json()["error"]["message"]
    )
    assert server.client.get("/v1/computers/rest", headers=h).json()["state"] == "stopped"


def test_default_idle_timeout_comes_from_the_template(server: Server) -> None:
    assert create(server, name="default-idle")["idle_timeout"] == 1800


def test_timestamps_are_utc(server: Server) -> None:
    c = create(server, name="clock")
    assert str(c["created_at"]).endswith(("Z", "+00:00"))
    events = server.client.get("/v1/computers/clock/events", headers=server.headers()).json()
    assert events["events"][0]["created_at"].endswith(("Z", "+00:00"))


def test_a_computer_keeps_the_image_build_its_disk_came_from(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from sanbox.host.drivers import VmSpec
    from sanbox.host.drivers.local import LocalDriver
    from sanbox.host.image import Recipe, recipe_for

    kernels: list[str] = []
    boot = LocalDriver.boot

    async def spying(self: LocalDriver, spec: VmSpec) -> object:
        kernels.append(spec.kernel.parent.name)
        return await boot(self, spec)

    monkeypatch.setattr(LocalDriver, "boot", spying)
    first = recipe_for("base").build_id()
    c = create(server, name="old-timer")
    assert c["image"] == first and kernels == [first]
    h = server.headers()
    assert server.client.post("/v1/computers/old-timer/stop", headers=h).status_code == 200

    # the image is rebuilt (a new agent, say): new computers get the new build...
    images = server.data_dir.images / "base"
    shutil.copytree(images / first, images / "rebuilt")
    manifest = images / "rebuilt" / "manifest.json"
    manifest.write_text(manifest.read_text().replace(first, "rebuilt"))
    monkeypatch.setattr(Recipe, "build_id", lambda self, archive=None: "rebuilt")
    assert create(server, name="newcomer")["image"] == "rebuilt"
    # ...and the old computer still boots the kernel and initramfs its disk was made with
    assert server.client.post("/v1/computers/old-timer/start", headers=h).status_code == 200
    assert kernels == [first, "rebuilt", first]

    # its build removed by hand: it falls back to the template's current build
    server.client.post("/v1/computers/old-timer/stop", headers=h)
    shutil.rmtree(images / first)
    assert server.client.post("/v1/computers/old-timer/start", headers=h).status_code == 200
    assert kernels[-1] == "rebuilt"


def test_a_computers_environment_reaches_every_command(server: Server) -> None:
    """The env a computer was created with (and its template's) is in every exec, under the
    call's own."""
    create(server, name="envy", env={"GREETING": "hello", "WHO": "computer"})
    h = server.headers()
    body: dict[str, object] = {"cmd": ["sh", "-c", "echo $GREETING $WHO"]}
    r = server.client.post("/v1/computers/envy/exec", json=body, headers=h)
    assert r.json()["stdout"] == "hello computer\n", r.text
    body["env"] = {"WHO": "caller"}
    r = server.client.post("/v1/computers/envy/exec", json=body, headers=h)
    assert r.json()["stdout"] == "hello caller\n", r.text
