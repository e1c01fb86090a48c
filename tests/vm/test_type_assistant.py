"""The assistant computer type on a real guest: Hermes's OpenAI-compatible API server answers
through the published port (Sanbox's key in `?token=`, Hermes's own key in Authorization), a chat
goes to the model (model.test, the test internet's OpenAI stub) with the real key added by the
secret proxy while the guest holds only the placeholder, the API key is the computer's own
(checked by hermes-front on every request, Hermes not restarted for a new computer's key: a new
computer answers at once), and Hermes's home (sessions, config) is on the computer's disk."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from sanbox import Sanbox
from sanbox.sdk import Computer

from ..internet import MODEL_REPLY, Internet
from .conftest import build_type, claimed_from_pool, cli, ok
from .server import ServerProcess

pytestmark = [pytest.mark.vm, pytest.mark.timeout(3600)]

NAME = "assistant-t"
PORT = 8642
# the shipped config.yaml names a real provider; the test's computer talks to model.test
TO_STUB = (
    "sed -i 's|https://api.openai.com/v1|https://model.test/v1|; s|gpt-4.1-mini|stub-model|'"
    " /root/.hermes/config.yaml"
)


def sh(c: Computer, command: str) -> str:
    r = c.exec(["sh", "-c", command], timeout=120)
    assert r.exit_code == 0, f"{command}: {r.stdout}{r.stderr}"
    return r.stdout.strip()


def pairs(request: dict[str, object]) -> list[tuple[str, str]]:
    headers = request["headers"]
    assert isinstance(headers, list)
    return [(str(k), str(v)) for k, v in headers]


def published(c: Computer) -> str:
    """The port's Host (`8642-NAME.localhost:PORT`)."""
    return urlsplit(next(p.url for p in c.ports() if p.port == PORT)).netloc


def chat(server: ServerProcess, host: str, key: str, text: str) -> httpx.Response:
    """A chat request through the published URL: Sanbox's key as `?token=`, Hermes's key as the
    bearer (the relay strips the first and passes the second)."""
    return httpx.post(
        f"{server.url}/v1/chat/completions",
        params={"token": server.key},
        headers={"Host": host, "Authorization": f"Bearer {key}"},
        json={"model": "hermes-agent", "messages": [{"role": "user", "content": text}]},
        timeout=600,
    )


def first_request_served(server: ServerProcess, c: Computer) -> bool:
    """`GET /health` through the published port, once: a computer that answered running is
    ready (its readiness check passed in it), and Hermes was not restarted for its new key."""
    host = {"Host": published(c), "Authorization": f"Bearer {server.key}"}
    started = time.monotonic()
    r = httpx.get(f"{server.url}/health", headers=host, timeout=300)
    print(
        f"[assistant] {c.name}: first /health {r.status_code} in {time.monotonic() - started:.1f}s"
    )
    return r.status_code == 200 and r.json().get("platform") == "hermes-agent"


@pytest.fixture(scope="module")
def value() -> str:
    return "sk-hermes-test-" + secrets.token_hex(16)


@pytest.fixture(scope="module")
def assistant(types_server: ServerProcess, types_client: Sanbox, value: str) -> Iterator[Computer]:
    ok(types_server, "secret", "set", "llm", "--value-stdin", "--host", "model.test", stdin=value)
    started = time.monotonic()
    build_type(types_server, "assistant")
    print(f"[assistant] type built (or up to date) in {time.monotonic() - started:.0f}s")
    r = cli(types_server, "create", "--type", "assistant", "--name", NAME)
    assert r.returncode == 0 and "start: restored" in r.stdout, r.stdout + r.stderr
    c = types_client.computers.get(NAME)
    assert first_request_served(types_server, c), "a new assistant did not answer its first request"
    ok(types_server, "net", "allow", NAME, "model.test")
    sh(c, TO_STUB)  # the gateway restarts on its own within seconds
    yield c
    c.delete()


@pytest.fixture(scope="module")
def model_before(internet: Internet) -> int:
    """How many requests model.test had before this module's (other types' tests use it too)."""
    return len(internet.model_requests())


@pytest.fixture(scope="module")
def answer(types_server: ServerProcess, assistant: Computer, model_before: int) -> httpx.Response:
    """The first chat that the restarted gateway (new machine-id, new config) answers."""
    key, host = sh(assistant, "hermes-api-key"), published(assistant)
    deadline = time.monotonic() + 600
    while True:
        try:
            r = chat(types_server, host, key, "Say hello")
            if r.status_code == 200:
                return r
            last = f"{r.status_code} {r.text[:300]}"
        except httpx.HTTPError as exc:
            last = repr(exc)
        assert time.monotonic() < deadline, f"no chat answer: {last}\n" + sh(
            assistant, "tail -n 40 /var/log/sanbox/services/*"
        )
        time.sleep(2)


def test_health_answers_through_the_published_port(
    types_server: ServerProcess, assistant: Computer, answer: httpx.Response
) -> None:
    host = published(assistant)
    sanbox_key = {"Authorization": f"Bearer {types_server.key}"}
    r = httpx.get(f"{types_server.url}/health", headers={"Host": host, **sanbox_key}, timeout=120)
    assert r.status_code == 200 and r.json()["platform"] == "hermes-agent", r.text
    assert httpx.get(f"{types_server.url}/health", headers={"Host": host}).status_code == 404


def test_a_chat_reaches_the_model_with_the_real_key(
    types_server: ServerProcess,
    assistant: Computer,
    answer: httpx.Response,
    internet: Internet,
    value: str,
    model_before: int,
) -> None:
    assert answer.json()["choices"][0]["message"]["content"] == MODEL_REPLY, answer.text
    asked = [
        r
        for r in internet.model_requests()[model_before:]
        if r["method"] == "POST" and str(r["path"]).endswith("/chat/completions")
    ]
    assert asked, "model.test got no chat request"
    bearers = {v for r in asked for k, v in pairs(r) if k.lower() == "authorization"}
    assert bearers == {f"Bearer {value}"}
    placeholder = sh(assistant, 'echo "$HERMES_LLM_KEY"')
    assert placeholder.startswith("sbx_ph_") and value not in placeholder
    gateway = sh(assistant, "pgrep -o -f '[b]in/hermes gateway run'")
    seen = sh(assistant, f"cat /root/.hermes/config.yaml; tr '\\0' '\\n' < /proc/{gateway}/environ")
    assert placeholder in seen and value not in seen


def test_the_api_key_is_the_computers_own(
    types_server: ServerProcess, assistant: Computer, answer: httpx.Response
) -> None:
    kept = sh(assistant, "cat /root/.hermes/api-server-key").splitlines()
    assert kept[0] == sh(assistant, "cat /etc/machine-id") and len(kept[1]) == 48
    assert sh(assistant, "stat -c %a /root/.hermes/api-server-key") == "600"
    wrong = chat(types_server, published(assistant), "0" * 48, "hi")
    assert wrong.status_code == 401, wrong.text
    key, host = sh(assistant, "hermes-api-key"), published(assistant)
    body = {"model": "hermes-agent", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=types_server.url, params={"token": types_server.key}) as kept_alive:
        for bearer, status in ((key, 200), ("0" * 48, 401), (key, 200)):  # every request checked
            headers = {"Host": host, "Authorization": f"Bearer {bearer}"}
            r = kept_alive.post("/v1/chat/completions", headers=headers, json=body, timeout=600)
            assert r.status_code == status, (bearer == key, r.text)
    sanbox_only = {"Host": published(assistant), "Authorization": f"Bearer {types_server.key}"}
    missing = httpx.get(f"{types_server.url}/v1/models", headers=sanbox_only, timeout=120)
    assert missing.status_code == 401, missing.text  # Hermes's answer: the relay took the key


def test_sessions_are_kept_in_hermes_home_on_the_disk(
    assistant: Computer, answer: httpx.Response
) -> None:
    files = sh(assistant, "ls -a /root/.hermes").split()
    assert {"config.yaml", "state.db", "logs"} <= set(files), files
    assert "Say hello" in sh(
        assistant,
        'python3 -c "import sqlite3; print(sqlite3.connect('
        "'/root/.hermes/state.db').execute('select content from messages')"
        '.fetchall())"',
    )


def test_a_warm_pool_hands_out_gateways_each_with_its_own_key(
    types_server: ServerProcess, types_client: Sanbox, assistant: Computer
) -> None:
    with claimed_from_pool(types_server, types_client, "assistant", NAME + "-pooled") as c:
        assert first_request_served(types_server, c)
        key, other = sh(c, "hermes-api-key"), sh(assistant, "hermes-api-key")
        assert key != other
        for bearer, opens in ((key, True), (other, False)):  # its own key opens it, another's not
            r = chat(types_server, published(c), bearer, "hi")  # (its model is not reachable)
            assert (r.status_code != 401) == opens, r.text
