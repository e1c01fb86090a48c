"""`sanbox secret` and `sanbox create --secret` against a fake API (`config.TRANSPORT`): what each
command sends, and that a secret's value is read from standard input only and never shown.

The attack: a value that leaks into a command's output, an error line, an argument (shell history,
`ps`) or a URL; a value read without bound from a pipe that never ends.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner, Result

from sanbox.cli import config
from sanbox.cli.app import app
from sanbox.sdk import errors

from ..openapi_doc import check

pytestmark = pytest.mark.unit

VALUE = "sk-live-0123456789abcdef"
SECRET = {
    "id": "sec_1",
    "name": "openai",
    "hosts": ["api.openai.com"],
    "header": "Authorization: Bearer {value}",
    "placeholder_only": False,
    "version": 1,
    "created_at": "2026-12-01T00:00:00Z",
    "updated_at": "2026-12-01T00:00:00Z",
}
BINDING = {
    "secret": "openai",
    "computer": "cmp_1",
    "env": "OPENAI_API_KEY",
    "placeholder": "sbx_ph_abc",
    "created_at": "2026-12-01T00:00:00Z",
}
COMPUTER = {"id": "cmp_1", "name": "work", "state": "running"}


class FakeApi:
    """Answers each request with `answer(request)` (default: a record fit for the route), and
    keeps every request it got."""

    def __init__(self, answer: Callable[[httpx.Request], httpx.Response] | None = None) -> None:
        self.sent: list[httpx.Request] = []
        self.answer = answer or self.records

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        return self.answer(request)

    @staticmethod
    def records(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/v1/computers":
            return httpx.Response(200, json=COMPUTER)
        if path == "/v1/secrets":
            return httpx.Response(200, json={"secrets": [SECRET]})
        if path.endswith("/secrets"):
            return httpx.Response(200, json={"bindings": [BINDING]})
        if "/v1/computers/" in path:
            return httpx.Response(200, json=BINDING)
        return httpx.Response(200, json=SECRET)

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.sent if r.content]


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> FakeApi:
    fake = FakeApi()
    monkeypatch.setattr(config, "TRANSPORT", httpx.MockTransport(fake))
    monkeypatch.setenv("SANBOX_URL", "http://sanbox.test")
    monkeypatch.setenv("SANBOX_API_KEY", "sbk_test")
    monkeypatch.setenv("SANBOX_CONFIG", str(tmp_path / "config.toml"))
    return fake


def run(*args: str, stdin: str | bytes | None = None) -> Result:
    return CliRunner().invoke(app, list(args), input=stdin)


def test_set_reads_the_value_from_stdin_and_never_shows_it(api: FakeApi) -> None:
    r = run(
        "secret",
        "set",
        "openai",
        "--value-stdin",
        "--host",
        "api.openai.com",
        "--host",
        "*.openai.com",
        stdin=VALUE + "\n",
    )
    assert r.exit_code == 0, r.output
    assert "openai" in r.output and "version 1" in r.output and VALUE not in r.output
    (request,) = api.sent
    assert (request.method, request.url.path) == ("PUT", "/v1/secrets/openai")
    assert VALUE not in str(request.url)
    assert json.loads(request.content) == {
        "value": VALUE,
        "hosts": ["api.openai.com", "*.openai.com"],
        "header": None,
        "placeholder_only": False,
    }


@pytest.mark.parametrize(
    ("stdin", "sent"),
    [
        (VALUE, VALUE),
        (VALUE + "\n", VALUE),
        (VALUE + "\r\n", VALUE),
        (VALUE + "\n\n", VALUE + "\n"),  # only ONE newline goes: the server judges the rest
        ("  " + VALUE + " \n", "  " + VALUE + " "),
    ],
)
def test_set_strips_one_trailing_newline_only(api: FakeApi, stdin: str, sent: str) -> None:
    assert (
        run("secret", "set", "s", "--value-stdin", "--host", "h.test", stdin=stdin).exit_code == 0
    )
    assert api.bodies()[0]["value"] == sent


def test_header_and_placeholder_options(api: FakeApi) -> None:
    r = run(
        "secret",
        "set",
        "gh",
        "--value-stdin",
        "--host",
        "api.github.com",
        "--header",
        "X-Api-Key: {value}",
        stdin=VALUE,
    )
    assert r.exit_code == 0, r.output
    r = run(
        "secret",
        "set",
        "gh",
        "--value-stdin",
        "--host",
        "api.github.com",
        "--placeholder",
        stdin=VALUE,
    )
    assert r.exit_code == 0, r.output
    first, second = api.bodies()
    assert (first["header"], first["placeholder_only"]) == ("X-Api-Key: {value}", False)
    assert (second["header"], second["placeholder_only"]) == (None, True)


@pytest.mark.parametrize(
    ("args", "stdin", "code"),
    [
        (["--host", "h.test"], VALUE, "invalid_argument"),  # no --value-stdin: refused
        (["--host", "h.test", "--value-stdin"], "", "invalid_secret"),
        (["--host", "h.test", "--value-stdin"], "\n", "invalid_secret"),
        (["--host", "h.test", "--value-stdin"], "x" * (8 * 1024 + 1), "invalid_secret"),
        (["--host", "h.test", "--value-stdin"], "y" * 10**6, "invalid_secret"),  # not all read
        (["--host", "h.test", "--value-stdin"], b"\xff\xfe" + VALUE.encode(), "invalid_secret"),
    ],
)
def test_bad_values_are_refused_before_anything_is_sent(
    api: FakeApi, args: list[str], stdin: str | bytes, code: str
) -> None:
    r = run("secret", "set", "s", *args, stdin=stdin)
    assert r.exit_code == 1 and f"error ({code})" in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output
    assert VALUE not in r.output and "xxxx" not in r.output and "yyyy" not in r.output
    assert api.sent == []


def test_a_value_of_8_kib_is_sent_whole(api: FakeApi) -> None:
    value = "k" * 8 * 1024
    assert (
        run("secret", "set", "s", "--value-stdin", "--host", "h", stdin=value + "\n").exit_code == 0
    )
    assert api.bodies()[0]["value"] == value


def test_a_host_is_required(api: FakeApi) -> None:
    r = run("secret", "set", "s", "--value-stdin", stdin=VALUE)
    assert r.exit_code == 2 and "--host" in r.output
    assert api.sent == []


def test_the_servers_refusal_is_one_line_without_the_value(api: FakeApi) -> None:
    error = {"code": "invalid_secret", "message": "hosts: 'a b' is not a host name or *.pattern"}
    api.answer = lambda _request: httpx.Response(422, json={"error": error})
    r = run("secret", "set", "s", "--value-stdin", "--host", "a b", stdin=VALUE)
    assert r.exit_code == 1, r.output
    assert r.output.strip() == f"error (invalid_secret) {error['message']}"


def test_ls_get_and_json_hold_no_value(api: FakeApi) -> None:
    r = run("secret", "ls")
    assert r.exit_code == 0 and "openai" in r.output and "api.openai.com" in r.output
    r = run("secret", "ls", "--json")
    assert json.loads(r.output) == [SECRET]
    r = run("secret", "get", "openai", "--json")
    assert json.loads(r.output) == SECRET
    r = run("secret", "get", "openai")
    assert r.exit_code == 0 and "Authorization: Bearer {value}" in r.output
    assert [(q.method, q.url.path) for q in api.sent] == [
        ("GET", "/v1/secrets"),
        ("GET", "/v1/secrets"),
        ("GET", "/v1/secrets/openai"),
        ("GET", "/v1/secrets/openai"),
    ]


def test_rm_and_rm_force(api: FakeApi) -> None:
    assert run("secret", "rm", "openai").exit_code == 0
    missing = {"code": "secret_not_found", "message": "no secret 'gone'"}
    api.answer = lambda _request: httpx.Response(404, json={"error": missing})
    r = run("secret", "rm", "gone")
    assert r.exit_code == 1 and "error (secret_not_found)" in r.output
    assert run("secret", "rm", "-f", "gone").exit_code == 0
    assert [(q.method, q.url.path) for q in api.sent] == [("DELETE", "/v1/secrets/openai")] + [
        ("DELETE", "/v1/secrets/gone")
    ] * 2


def test_bind_prints_the_placeholder_and_the_variable(api: FakeApi) -> None:
    r = run("secret", "bind", "openai", "work", "--env", "OPENAI_API_KEY")
    assert r.exit_code == 0, r.output
    assert "$OPENAI_API_KEY" in r.output and "sbx_ph_abc" in r.output
    r = run("secret", "unbind", "openai", "work")
    assert r.exit_code == 0 and "unbound openai from cmp_1" in r.output
    r = run("secret", "bindings", "work", "--json")
    assert json.loads(r.output) == [BINDING]
    assert [(q.method, q.url.path) for q in api.sent] == [
        ("PUT", "/v1/computers/work/secrets/openai"),
        ("DELETE", "/v1/computers/work/secrets/openai"),
        ("GET", "/v1/computers/work/secrets"),
    ]
    assert json.loads(api.sent[0].content) == {"env": "OPENAI_API_KEY"}


def test_bind_without_a_variable(api: FakeApi) -> None:
    api.answer = lambda _request: httpx.Response(200, json={**BINDING, "env": None})
    r = run("secret", "bind", "openai", "work")
    assert r.exit_code == 0 and "no variable" in r.output
    assert json.loads(api.sent[0].content) == {"env": None}


def test_create_binds_secrets(api: FakeApi) -> None:
    r = run("create", "--name", "work", "--secret", "openai=OPENAI_API_KEY", "--secret", "gh")
    assert r.exit_code == 0, r.output
    (body,) = api.bodies()
    assert body["secrets"] == [
        {"name": "openai", "env": "OPENAI_API_KEY"},
        {"name": "gh", "env": None},
    ]


def test_create_without_secrets_sends_none(api: FakeApi) -> None:
    assert run("create", "--name", "work").exit_code == 0
    assert "secrets" not in api.bodies()[0]


@pytest.mark.parametrize("bad", ["=ENV", "openai=", ""])
def test_create_refuses_a_malformed_secret(api: FakeApi, bad: str) -> None:
    r = run("create", "--secret", bad)
    assert r.exit_code == 1 and "error (invalid_argument)" in r.output, r.output
    assert api.sent == []


@pytest.mark.parametrize(
    ("code", "status", "cls"),
    [
        ("secret_not_found", 404, errors.SecretNotFoundError),
        ("binding_not_found", 404, errors.BindingNotFoundError),
        ("invalid_secret", 422, errors.InvalidSecretError),
    ],
)
def test_the_secret_error_codes_map_to_their_classes(
    code: str, status: int, cls: type[errors.SanboxError]
) -> None:
    body = json.dumps({"error": {"code": code, "message": "no"}}).encode()
    error = errors.error_from_response(status, body)
    assert type(error) is cls and isinstance(error, errors.error_class(None, status))


def test_what_the_commands_send_is_what_the_api_takes(api: FakeApi) -> None:
    """Each body against its component in docs/openapi.json."""
    run(
        "secret",
        "set",
        "s",
        "--value-stdin",
        "--host",
        "h.test",
        "--header",
        "X: {value}",
        stdin=VALUE,
    )
    run("secret", "bind", "s", "work", "--env", "KEY")
    run("create", "--secret", "s=KEY", "--secret", "t")
    for request, component in zip(
        api.sent, ["SecretPut", "BindingPut", "ComputerCreate"], strict=True
    ):
        check(component, json.loads(request.content))
