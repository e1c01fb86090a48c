"""What of a port's DevTools discovery answer the host passes on (`api/ports/devtools_answer.py`,
the requests and the bound on answers held in `devtools.py`): the checks alone, on bytes; the
relay is tested in tests/component/test_devtools_discovery.py."""

from __future__ import annotations

import json

import pytest

from sanbox.api.ports.devtools import HeldBytes, caller_of, discovery_request
from sanbox.api.ports.devtools_answer import (
    JSON_TYPE,
    MAX_ANSWER,
    MAX_CHARSETS,
    MAX_CONTAINERS,
    MAX_DEPTH,
    Caller,
    DevToolsAnswerError,
    checked_answer,
    checked_body,
    frontend_url,
    json_shaped,
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


def test_an_answer_s_size_and_containers_are_bounded() -> None:
    """A guest can be called through its own public port: what one answer costs to check is
    bounded, so no answer holds the event loop (or a worker) long."""
    assert MAX_ANSWER == 256 * 1024
    long = b'"' + b"a" * MAX_ANSWER + b'"'
    with pytest.raises(DevToolsAnswerError, match="larger than 256 KiB"):
        checked_body(long, PLAIN)
    many = b"[" + b"{}," * MAX_CONTAINERS + b"{}]"  # the objects and the array
    with pytest.raises(DevToolsAnswerError, match="objects and arrays"):
        checked_body(many, PLAIN)
    most = b"[" + b"{}," * (MAX_CONTAINERS - 2) + b"{}]"
    assert len(json.loads(checked_body(most, PLAIN))) == MAX_CONTAINERS - 1
    with pytest.raises(DevToolsAnswerError, match="out of range"):
        checked_body(b'{"n": 1e400}', PLAIN)  # parsed as inf: never sent on as Infinity


def test_what_some_client_could_read_as_json_is_json_shaped() -> None:
    bom = b"\xef\xbb\xbf"
    shaped = [
        (b'{"a": 1}', []),
        (b" \r\n\t[1]", []),
        (bom + b"{}", []),  # fetch().json() and Python strip a UTF-8 BOM
        ("{}".encode("utf-16"), []),  # Python's json.loads of bytes reads UTF-16 and -32
        ("[]".encode("utf-16-le"), []),
        ("{}".encode("utf-32"), []),
        ("\xa0{}".encode(), []),
        (b"+AHs-}", [(b"content-type", b"text/plain; charset=UTF-7")]),  # requests decodes so
        ("{}".encode("cp500"), [(b"content-type", b'text/plain;charset="cp500"')]),
        (b"x", [(b"content-type", f"text/plain; charset=c{n}".encode()) for n in range(9)]),
    ]
    for body, head in shaped:
        assert json_shaped(body, head), body
    assert MAX_CHARSETS < 9
    plain = [b"", b"<html>", b"not json", bom + b"hello", b'"a"', b"123", b"null", b"\x1f\x8b"]
    for body in plain:
        assert not json_shaped(body, [(b"content-type", b"application/json")]), body
    assert not json_shaped(b"+AHs-}", [(b"content-type", b"text/plain; charset=x-none")])


def test_an_answer_goes_on_unchanged_checked_or_not_at_all() -> None:
    page = b'{"webSocketDebuggerUrl": "ws://evil/devtools/page/1"}'
    rewritten = f'{{"webSocketDebuggerUrl": "ws://{HOST}/devtools/page/1"}}'.encode()
    html = [(b"content-type", b"text/html"), (b"content-length", b"6"), (b"x-app", b"1")]
    # no object a client could take: the app's answer as it was, whatever its status
    for status in (200, 206, 304, 404):
        assert checked_answer(status, html, b"<html>", PLAIN) == (html, b"<html>")
    assert checked_answer(304, [], b"", PLAIN) == ([], b"")
    # JSON: checked, serialized anew, its JSON type kept (a +json one too), else application/json
    for kept in (b"application/json", b"application/vnd.api+json; charset=UTF-8"):
        head = [(b"content-type", kept), (b"content-length", b"99"), (b"location", b"/x")]
        assert checked_answer(404, head, page, PLAIN) == (
            [(b"content-type", kept), (b"content-length", str(len(rewritten)).encode())],
            rewritten,
        )
    for replaced in (
        [(b"content-type", b"text/plain")],
        [(b"content-type", b"application/json; charset=utf-16")],  # the body goes on as UTF-8
        [(b"content-type", b"application/json"), (b"content-type", b"text/html")],
        [],
    ):
        head, body = checked_answer(200, replaced, "\ufeff".encode() + page, PLAIN)
        assert (head[0], body) == ((b"content-type", JSON_TYPE), rewritten)
    # refused whatever the body: a redirect a client follows, a body the host cannot read
    for status, head in (
        (302, [(b"location", b"http://evil/json/version")]),
        (307, [(b"Location", b"/json/version")]),
        (200, [(b"content-encoding", b"gzip")]),
        (200, [(b"content-encoding", b"identity, br")]),
    ):
        with pytest.raises(DevToolsAnswerError):
            checked_answer(status, head, b"<html>", PLAIN)
    assert checked_answer(200, [(b"content-encoding", b"identity")], b"ok", PLAIN)[1] == b"ok"
    # starts as JSON but is not (NDJSON, a truncated answer): refused, as a lenient client may
    # parse a prefix of it
    for body in (b'{"a": 1}\n{"b": 2}\n', b'[{"webSocketDebuggerUrl": "ws://evil/devtools/p"'):
        with pytest.raises(DevToolsAnswerError, match="not JSON"):
            checked_answer(200, [(b"content-type", b"application/x-ndjson")], body, PLAIN)


def test_the_bytes_held_at_once_are_bounded() -> None:
    held = HeldBytes(10)
    assert held.take(6) and held.take(4)
    assert not held.take(1)
    held.give(4)
    assert held.take(3) and held.held == 9
