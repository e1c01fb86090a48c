"""What of a port's DevTools discovery answer the host passes on (`api/ports/devtools.py`): the
checks alone, on bytes; the relay is tested in tests/component/test_devtools_discovery.py."""

from __future__ import annotations

import json

import pytest

from sanbox.api.ports.devtools import (
    MAX_ANSWER,
    MAX_DEPTH,
    Caller,
    DevToolsAnswerError,
    caller_of,
    checked_body,
    discovery_request,
    frontend_url,
    socket_url,
)

pytestmark = pytest.mark.unit
HOST = "9223-web.localhost:7070"
PLAIN, TLS = Caller(False, HOST), Caller(True, HOST)


def test_the_requests_a_cdp_client_discovers_with() -> None:
    for path in ("/json", "/json/", "/json/version", "/json/version/", "/json/list", "/json/new"):
        assert discovery_request({"type": "http", "path": path}), path
    assert discovery_request({"type": "http", "path": "/prefix/JSON/Version/"})
    for path in ("/", "/json/protocol", "/json/activate/ID", "/jsonx", "/json/version/x"):
        assert not discovery_request({"type": "http", "path": path}), path
    assert not discovery_request({"type": "websocket", "path": "/json/version"})


def test_the_caller_s_origin_is_its_host_and_scheme() -> None:
    scope = {"type": "http", "scheme": "http", "headers": [(b"host", b"9223-Web.localhost:7070")]}
    assert caller_of(scope) == PLAIN
    assert caller_of({**scope, "scheme": "https"}) == TLS
    for host in (b"", b"a b", b"evil/x", b"[::1]:7070", b"h@x", b"x\\y"):
        assert caller_of({**scope, "headers": [(b"host", host)]}) is None, host


def test_a_websocket_url_goes_to_the_caller_s_origin_or_nowhere() -> None:
    path = "/devtools/browser/5c2c29a5-83b0"
    for named in (f"ws://127.0.0.1:9222{path}", f"WSS://attacker.example{path}?k=1#f"):
        assert socket_url(named, PLAIN) == f"ws://{HOST}{path}"
        assert socket_url(named, TLS) == f"wss://{HOST}{path}"
    for bad in (
        None,
        7,
        "ws://attacker.example/x",  # no /devtools/ path
        f"http://attacker.example{path}",
        path,  # no host: not what Chromium says
        "ws://x/devtools/",
        "ws://x/devtools/a\\@evil",
        "ws://x/devtools/%2F%2Fevil",
        "ws://[x/devtools/a",
    ):
        with pytest.raises(DevToolsAnswerError):
            socket_url(bad, PLAIN)


def test_a_frontend_url_goes_to_the_caller_s_origin_or_is_left_out() -> None:
    page = "/devtools/page/A1B2"
    assert frontend_url(f"/devtools/inspector.html?ws=127.0.0.1:9222{page}", PLAIN) == (
        f"http://{HOST}/devtools/inspector.html?ws={HOST}{page}"
    )
    named = f"http://evil/devtools/devtools_app.html?panel=x&wss=evil{page}"
    assert frontend_url(named, TLS) == f"https://{HOST}/devtools/devtools_app.html?wss={HOST}{page}"
    for other in (
        f"https://chrome-devtools-frontend.appspot.com/serve_rev/@a/inspector.html?ws=x{page}",
        "/devtools/inspector.html",
        "/devtools/inspector.html?ws=evil/steal",
        None,
    ):
        assert frontend_url(other, PLAIN) is None, other


def test_a_body_is_json_serialized_anew_with_every_url_checked() -> None:
    nested = {"targets": [{"webSocketDebuggerUrl": "ws://a/devtools/page/1", "n": 1.5}]}
    body = checked_body(json.dumps(nested).encode("utf-16"), PLAIN)
    assert json.loads(body) == {
        "targets": [{"webSocketDebuggerUrl": f"ws://{HOST}/devtools/page/1", "n": 1.5}]
    }
    answer = {"devtoolsFrontendUrl": "https://evil/x", "title": "✓"}
    assert checked_body(json.dumps(answer).encode(), PLAIN) == '{"title": "✓"}'.encode()
    deep = b"[" * MAX_DEPTH + b"{}" + b"]" * MAX_DEPTH
    for bad in (
        b"",
        b"<html>",
        b'{"webSocketDebuggerUrl": "ws://evil/x"}',
        b'[{"webSocketDebuggerUrl": "ws://a/devtools/p"}, {"webSocketDebuggerUrl": "ws://evil/"}]',
        b'{"webSocketDebuggerUrl": "ws://a/devtools/p"} trailing',
        b'{"a": NaN}',
        b'{"a": "\xff"}',
        b"[" * 5000 + b"]" * 5000,
        deep,
        b" " * (MAX_ANSWER + 1),
    ):
        with pytest.raises(DevToolsAnswerError):
            checked_body(bad, PLAIN)
    assert json.loads(checked_body(deep[1:-1], PLAIN)) == json.loads(deep[1:-1])
