"""envd's process calls refuse a malformed message in Connect's words (`invalid_argument`, or
`not_found` for a pid that names none) instead of failing inside the handler (a bare 500, a
stream cut without its end)."""

from __future__ import annotations

import json
import threading
import time

import pytest

from sanbox.e2b import connect

from .conftest import E2bStand

pytestmark = pytest.mark.component

PROCESS = "/e2b-envd/process.Process"


@pytest.mark.parametrize(
    ("method", "body", "code"),
    [
        (
            "SendSignal",
            b'{"process": {"pid": 1}, "signal": ["SIGNAL_SIGKILL"]}',
            "invalid_argument",
        ),
        ("SendSignal", b'{"process": {"pid": 1}, "signal": {"a": 1}}', "invalid_argument"),
        ("Update", b'{"process": {"pid": 1}, "pty": {"size": [24, 80]}}', "invalid_argument"),
        (
            "Update",
            b'{"process": {"pid": 1}, "pty": {"size": {"rows": Infinity}}}',
            "invalid_argument",
        ),
        ("SendSignal", b'{"process": {"pid": Infinity}, "signal": "SIGNAL_SIGKILL"}', "not_found"),
    ],
)
def test_a_malformed_unary_call_is_refused(
    e2b: E2bStand, method: str, body: bytes, code: str
) -> None:
    _, envd = e2b.create()
    r = e2b.client.post(
        f"{PROCESS}/{method}", content=body, headers={**envd, "Content-Type": "application/json"}
    )
    assert (r.status_code, r.json()["code"]) == (connect.STATUS[code], code), r.text


def test_a_start_with_a_malformed_pty_ends_its_stream_with_the_reason(e2b: E2bStand) -> None:
    _, envd = e2b.create()
    message = {"process": {"cmd": "true"}, "pty": {"size": "80x24"}}
    r = e2b.client.post(
        f"{PROCESS}/Start",
        content=connect.envelope(message),
        headers={**envd, "Content-Type": connect.STREAM_TYPE},
    )
    assert r.status_code == 200, r.text
    envelopes = connect.EnvelopeReader().feed(r.content)
    assert envelopes[-1].end, envelopes
    assert envelopes[-1].message["error"]["code"] == "invalid_argument", json.dumps(
        envelopes[-1].message
    )


def test_a_running_process_is_refused_a_signal_that_is_no_name(e2b: E2bStand) -> None:
    _, envd = e2b.create()
    unary = {**envd, "Content-Type": "application/json"}

    def listed() -> list[dict[str, object]]:
        r = e2b.client.post(f"{PROCESS}/List", json={}, headers=unary)
        return list(r.json()["processes"])

    started = connect.envelope({"process": {"cmd": "sleep", "args": ["30"]}})
    stream = threading.Thread(  # its answer (buffered by the test client) ends with the process
        target=e2b.client.post,
        args=(f"{PROCESS}/Start",),
        kwargs={"content": started, "headers": {**envd, "Content-Type": connect.STREAM_TYPE}},
    )
    stream.start()
    deadline = time.monotonic() + 10
    while not (running := listed()):
        assert time.monotonic() < deadline, "the process did not start"
        time.sleep(0.05)
    process = {"pid": running[0]["pid"]}
    try:
        r = e2b.client.post(
            f"{PROCESS}/SendSignal",
            json={"process": process, "signal": ["SIGNAL_SIGKILL"]},
            headers=unary,
        )
        assert (r.status_code, r.json()["code"]) == (400, "invalid_argument"), r.text
    finally:
        e2b.client.post(
            f"{PROCESS}/SendSignal",
            json={"process": process, "signal": "SIGNAL_SIGKILL"},
            headers=unary,
        )
        stream.join(10)
