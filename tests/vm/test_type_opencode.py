"""The opencode computer type through the types server and the CLI: `opencode serve` answers on
its published port, private twice over (the org's key for Sanbox, taken as the port cookie, and
the computer's own password as HTTP Basic auth for opencode); the password is made per computer
(a computer claimed from a warm pool has its own); the web UI and the sessions API answer, and a
session outlasts a stop/start. The model provider's key is the org's secret `llm`: the server
holds only its placeholder, and a chat turn (and a shell's `node -e "fetch(...)"`: the secret
proxy's CA as Node trusts it) reaches the test internet's model stub with the real key."""

from __future__ import annotations

import base64
import json
import secrets
import time
from collections.abc import Iterator

import httpx
import pytest
from httpx import Response

from sanbox import Sanbox
from sanbox.sdk import Computer

from ..internet import MODEL_REPLY, Internet
from .conftest import build_type, claimed_from_pool, cli, ok, wait_for
from .server import ServerProcess

pytestmark = [pytest.mark.vm, pytest.mark.timeout(3600)]

NAME = "opencode-t"
PORT = 4096
VALUE = "sk-opencode-test-" + secrets.token_hex(16)  # the org's secret `llm`
# what a user does to point the type at another provider: edit the config, restart the server
TO_MODEL_TEST = """
import json
path = "/root/.config/opencode/opencode.json"
config = json.load(open(path))
config["provider"]["llm"]["options"]["baseURL"] = "https://model.test/v1"
config["provider"]["llm"]["models"] = {"stub-model": {"name": "Stub"}}
config["model"] = config["small_model"] = "llm/stub-model"
json.dump(config, open(path, "w"), indent=2)
"""


def sh(c: Computer, command: str, timeout: float = 120) -> str:
    r = c.exec(command, timeout=timeout)
    assert r.exit_code == 0, f"{command}: {r.stdout}{r.stderr}"
    return r.stdout.strip()


def services_log(c: Computer) -> str:
    return c.exec("tail -n 40 /var/log/sanbox/services/*.log", timeout=60).stdout


class Opencode:
    """HTTP to a computer's opencode through its published URL: Sanbox's key as the port cookie
    (from one `?token=` GET), so that Authorization is free for opencode's own Basic auth."""

    def __init__(self, server: ServerProcess, name: str) -> None:
        self.server = server
        self.host = f"{PORT}-{name}.localhost:{server.port}"
        self.base = f"http://127.0.0.1:{server.port}"
        r = httpx.get(f"{self.base}/?token={server.key}", headers={"Host": self.host}, timeout=60)
        assert r.status_code == 200 and "sanbox_port=" in r.headers["set-cookie"], r.text
        self.cookie = r.headers["set-cookie"].split(";")[0]

    def request(
        self, method: str, path: str, password: str | None, body: object = None, wait: float = 120
    ) -> Response:
        headers = {"Host": self.host, "Cookie": self.cookie}
        if password is not None:
            basic = base64.b64encode(f"opencode:{password}".encode()).decode()
            headers["Authorization"] = f"Basic {basic}"
        return httpx.request(method, self.base + path, headers=headers, json=body, timeout=wait)

    def answers(self, password: str) -> bool:
        """opencode answers this password (it starts minutes after a boot under emulation)."""
        try:
            return self.request("GET", "/global/health", password).status_code == 200
        except httpx.HTTPError:
            return False


def password(c: Computer) -> str:
    return sh(c, "opencode-password")


def opencode_service(c: Computer) -> tuple[int, int]:
    """The pid of `opencode serve` and how often its service was restarted."""
    status = json.loads(sh(c, "cat /run/sanbox/services/opencode.json"))
    assert status["state"] == "running", status
    assert int(sh(c, "pgrep -o -f '^opencode serve'")) == status["pid"], status
    return status["pid"], status["restarts"]


@pytest.fixture(scope="module")
def built(types_server: ServerProcess) -> str:
    # bound by the type: a create fails with secret_not_found without it (any value will do here)
    ok(
        types_server,
        "secret",
        "set",
        "llm",
        "--value-stdin",
        "--host",
        "api.openai.com",
        "--host",
        "model.test",
        stdin=VALUE,
    )
    started = time.monotonic()
    out = build_type(types_server, "opencode")
    print(f"opencode type ready in {time.monotonic() - started:.0f}s: {out[-300:]}")
    return "opencode"


def create(server: ServerProcess, client: Sanbox, kind: str, name: str) -> Computer:
    cli(server, "rm", "-f", name)  # a computer a failed run left behind
    out = ok(server, "create", "--type", kind, "--name", name)
    assert "start: restored" in out, out  # the server came with the ready snapshot's memory
    return client.computers.get(name)


@pytest.fixture(scope="module")
def computer(types_server: ServerProcess, types_client: Sanbox, built: str) -> Iterator[Computer]:
    c = create(types_server, types_client, built, NAME)
    yield c
    c.delete()


@pytest.fixture(scope="module")
def oc(types_server: ServerProcess, computer: Computer) -> Opencode:
    oc = Opencode(types_server, NAME)
    pw = password(computer)
    wait_for(lambda: oc.answers(pw), "opencode with this computer's password", timeout=300)
    return oc


def test_the_port_is_published_and_the_server_holds_only_the_placeholder(
    types_server: ServerProcess, computer: Computer, oc: Opencode
) -> None:
    assert [(p.port, p.public) for p in computer.ports()] == [(PORT, False)]
    env = sh(computer, "tr '\\0' '\\n' < /proc/$(pgrep -o -f '^opencode serve')/environ")
    key = [line.split("=", 1)[1] for line in env.splitlines() if line.startswith("OPENCODE_LLM_")]
    assert key and key[0].startswith("sbx_ph_"), services_log(computer)
    assert "OPENCODE_DISABLE_MODELS_FETCH=1" in env.splitlines()
    assert VALUE not in env
    assert sh(computer, "opencode --version") == "1.18.33"


def test_without_the_password_401_and_with_it_the_web_ui(
    types_server: ServerProcess, computer: Computer, oc: Opencode
) -> None:
    no_key = httpx.get(f"{oc.base}/session", headers={"Host": oc.host}, timeout=60)
    assert no_key.status_code == 404 and no_key.json()["error"]["code"] == "port_not_found"
    denied = oc.request("GET", "/session", None)
    assert denied.status_code == 401 and "basic" in denied.headers["www-authenticate"].lower()
    assert oc.request("GET", "/session", "wrong-password").status_code == 401
    page = oc.request("GET", "/", password(computer))
    assert page.status_code == 200 and "text/html" in page.headers["content-type"], page.text
    assert "<title>OpenCode" in page.text
    health = oc.request("GET", "/global/health", password(computer)).json()
    assert health == {"healthy": True, "version": "1.18.33"}, health


def test_each_computer_has_its_own_password_and_a_warm_pool_hands_them_out(
    types_server: ServerProcess, types_client: Sanbox, computer: Computer, oc: Opencode, built: str
) -> None:
    """A pool member is restored from the ready snapshot, as every create is: claimed, it has a
    password of its own, which its front asks at once, with no restart of opencode: both
    computers run the ready snapshot's opencode process, never restarted."""
    with claimed_from_pool(types_server, types_client, built, NAME + "2") as other:
        mine, theirs = password(computer), password(other)
        assert len(mine) == 32 and mine != theirs and theirs.isalnum()
        stamp = sh(other, "cat /root/.config/opencode/server-password.machine-id")
        assert stamp == sh(other, "cat /etc/machine-id")
        assert sh(other, "stat -c %a /root/.config/opencode/server-password") == "600"
        o2 = Opencode(types_server, NAME + "2")
        assert o2.request("GET", "/global/health", theirs).status_code == 200
        assert o2.request("GET", "/session", mine).status_code == 401
        pid, restarts = opencode_service(other)
        assert (pid, restarts) == (opencode_service(computer)[0], 0)
        # each request is checked, not only a connection's first
        with httpx.Client(base_url=o2.base, timeout=60) as http:
            heads = {"Host": o2.host, "Cookie": o2.cookie}
            for who, code in ((theirs, 200), (mine, 401), (None, 401), (theirs, 200)):
                auth = ("opencode", who) if who else None
                assert http.get("/session", headers=heads, auth=auth).status_code == code


def test_a_session_outlasts_a_stop_and_a_start_and_a_chat_turn_carries_the_real_key(
    types_server: ServerProcess, computer: Computer, oc: Opencode, internet: Internet
) -> None:
    """A session outlasts a pause and a resume, and is kept on the disk; the user points the
    config at another provider (model.test) before the stop, and the fresh boot's server takes
    it: a chat turn reaches it with the real key. (One fresh start for both: opencode takes
    minutes to start under emulation.)"""
    pw = password(computer)
    made = oc.request("POST", "/session", pw, {"title": "kept on disk"})
    assert made.status_code == 200, made.text
    sid = made.json()["id"]
    assert made.json()["directory"] == "/root/work"
    listed = oc.request("GET", "/session", pw).json()
    assert isinstance(listed, list) and sid in [s["id"] for s in listed], listed
    # paused with its memory and resumed: the same server (its front holds the first requests
    # until it answers again), the same password, the session there
    pid = opencode_service(computer)[0]
    ok(types_server, "pause", NAME)
    ok(types_server, "resume", NAME)
    listed = oc.request("GET", "/session", pw).json()
    assert sid in [s["id"] for s in listed] and opencode_service(computer) == (pid, 0), listed
    sh(computer, f"python3 -c '{TO_MODEL_TEST}'")
    ok(types_server, "net", "allow", NAME, "model.test")
    ok(types_server, "stop", NAME)
    ok(types_server, "start", NAME)
    assert password(computer) == pw  # the same computer (machine-id): the same password
    wait_for(lambda: oc.answers(pw), "opencode after a fresh boot", timeout=300)
    listed = oc.request("GET", "/session", pw).json()
    assert [s["title"] for s in listed if s["id"] == sid] == ["kept on disk"], listed
    before = len(internet.model_requests())  # other types' tests talk to model.test too
    turn = {
        "parts": [{"type": "text", "text": "Say hello."}],
        "model": {"providerID": "llm", "modelID": "stub-model"},
    }
    r = oc.request("POST", f"/session/{sid}/message", pw, turn, wait=600)
    assert r.status_code == 200 and MODEL_REPLY in r.text, r.text[-2000:] + services_log(computer)
    keys = [authorization(q) for q in internet.model_requests()[before:]]
    assert keys and set(keys) == {f"Bearer {VALUE}"}, keys  # each turn's requests: the real key
    # Node's own fetch (undici, which trusts only NODE_EXTRA_CA_CERTS beside its bundled roots)
    # from a shell in the computer: the secret proxy's certificate is trusted, the key is added
    url = "https://model.test/v1/models?client=node"
    fetch = f"fetch('{url}').then(r => process.exit(r.ok ? 0 : 1))"
    sh(computer, f'node -e "{fetch}"')
    node = [q for q in internet.model_requests() if q["path"] == "/v1/models?client=node"]
    assert node and authorization(node[-1]) == f"Bearer {VALUE}", node


def authorization(request: dict[str, object]) -> str | None:
    pairs = request["headers"]
    assert isinstance(pairs, list)
    return next((v for k, v in pairs if k.lower() == "authorization"), None)
