"""envd's process calls refuse a malformed message in Connect's words (`invalid_argument`, or
`not_found` for a pid that names none) instead of failing inside the handler (a bare 500, a
stream cut without its end). A signal envd does not send (any but SIGKILL and SIGTERM, a name
its enum lacks included) is `unimplemented`, as envd answers it, once the process is found: it
was `invalid_argument`, before the process was looked for."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator

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


@contextlib.contextmanager
def a_running_process(e2b: E2bStand, envd: dict[str, str]) -> Iterator[dict[str, int]]:
    """A `sleep 30` started through envd: its selector; killed at the end."""
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
    process = {"pid": int(str(running[0]["pid"]))}
    try:
        yield process
        assert listed(), "the process was signalled"
    finally:
        e2b.client.post(
            f"{PROCESS}/SendSignal",
            json={"process": process, "signal": "SIGNAL_SIGKILL"},
            headers=unary,
        )
        stream.join(10)


def test_a_running_process_is_refused_a_signal_that_is_no_name(e2b: E2bStand) -> None:
    _, envd = e2b.create()
    with a_running_process(e2b, envd) as process:
        r = e2b.client.post(
            f"{PROCESS}/SendSignal",
            json={"process": process, "signal": ["SIGNAL_SIGKILL"]},
            headers={**envd, "Content-Type": "application/json"},
        )
        assert (r.status_code, r.json()["code"]) == (400, "invalid_argument"), r.text


@pytest.mark.parametrize(
    ("signal", "named"),
    [
        ("SIGNAL_SIGINT", "SIGNAL_UNSPECIFIED"),  # a name the enum lacks: dropped, as envd's codec
        ("SIGNAL_UNSPECIFIED", "SIGNAL_UNSPECIFIED"),
        (None, "SIGNAL_UNSPECIFIED"),
        (0, "SIGNAL_UNSPECIFIED"),
        (2, "2"),  # a number the enum lacks: Go names it by its number
    ],
)
def test_a_signal_envd_does_not_send_is_unimplemented_as_envd_answers(
    e2b: E2bStand, signal: str | int | None, named: str
) -> None:
    """envd's SendSignal (packages/envd/internal/services/process/signal.go) answers any signal
    but SIGKILL and SIGTERM `unimplemented`, "invalid signal: <name>", and sends none."""
    _, envd = e2b.create()
    with a_running_process(e2b, envd) as process:
        body: dict[str, object] = {"process": process}
        if signal is not None:
            body["signal"] = signal
        r = e2b.client.post(
            f"{PROCESS}/SendSignal", json=body, headers={**envd, "Content-Type": "application/json"}
        )
        assert (r.status_code, r.json()["code"]) == (501, "unimplemented"), r.text
        assert r.json()["message"].startswith(f"invalid signal: {named}:"), r.text


def test_an_unknown_signal_to_a_process_not_there_is_not_found(e2b: E2bStand) -> None:
    """envd looks for the process first, then at the signal."""
    _, envd = e2b.create()
    r = e2b.client.post(
        f"{PROCESS}/SendSignal",
        json={"process": {"pid": 999999}, "signal": "SIGNAL_SIGINT"},
        headers={**envd, "Content-Type": "application/json"},
    )
    assert (r.status_code, r.json()["code"]) == (404, "not_found"), r.text
