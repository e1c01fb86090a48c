"""A Start's `Connect-Timeout-Ms` (the SDK's `commands.run(timeout=60)` and `pty.create(timeout=60)`
send it) kills the process at that deadline, as envd does (SIGKILL; its end says so as Go's
`os.ProcessState` does: exit code -1, "signal: killed"), so a command that outlives its timeout
does not hold one of the sandbox's 64 process slots; absent or 0, there is no deadline; one that is
not a number is refused before anything runs."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from sanbox.e2b import connect

from .conftest import E2bStand

pytestmark = pytest.mark.component

PROCESS = "/e2b-envd/process.Process"


def started(
    e2b: E2bStand, envd: dict[str, str], msg: dict[str, Any], timeout_ms: str | None
) -> tuple[threading.Thread, list[Any]]:
    """A Start in a thread of its own: its answer (the test client buffers it) comes at its end."""
    headers = {**envd, "Content-Type": connect.STREAM_TYPE}
    if timeout_ms is not None:
        headers["Connect-Timeout-Ms"] = timeout_ms
    answers: list[Any] = []

    def call() -> None:
        answers.append(
            e2b.client.post(f"{PROCESS}/Start", content=connect.envelope(msg), headers=headers)
        )

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    return thread, answers


def listed(e2b: E2bStand, envd: dict[str, str]) -> list[int]:
    r = e2b.client.post(
        f"{PROCESS}/List", json={}, headers={**envd, "Content-Type": "application/json"}
    )
    assert r.status_code == 200, r.text
    return [p["pid"] for p in r.json()["processes"]]


def kill_all(e2b: E2bStand, envd: dict[str, str]) -> None:
    for pid in listed(e2b, envd):
        e2b.client.post(
            f"{PROCESS}/SendSignal",
            json={"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"},
            headers={**envd, "Content-Type": "application/json"},
        )


def events(answer: Any) -> list[dict[str, Any]]:
    assert answer.status_code == 200, answer.text
    envelopes = connect.EnvelopeReader().feed(answer.content)
    assert envelopes and envelopes[-1].end, envelopes
    return [e.message["event"] for e in envelopes if not e.end]


@pytest.mark.parametrize("pty", [False, True])
def test_a_process_past_its_start_s_deadline_is_killed(e2b: E2bStand, pty: bool) -> None:
    _, envd = e2b.create()
    msg: dict[str, Any] = {"process": {"cmd": "sleep", "args": ["30"]}}
    if pty:
        msg["pty"] = {"size": {"rows": 24, "cols": 80}}
    begun = time.monotonic()
    thread, answers = started(e2b, envd, msg, "700")
    try:
        thread.join(15)
        assert not thread.is_alive(), "the process outlived its deadline"
    finally:
        kill_all(e2b, envd)
        thread.join(15)
    assert 0.6 < time.monotonic() - begun < 15
    said = events(answers[0])
    assert "start" in said[0], said
    end = said[-1]["end"]
    assert end == {"exitCode": -1, "status": "signal: killed", "error": "signal: killed"}, end
    assert listed(e2b, envd) == []  # its slot is free


@pytest.mark.parametrize("timeout_ms", [None, "0"])
def test_no_deadline_or_0_lets_a_process_run_to_its_end(
    e2b: E2bStand, timeout_ms: str | None
) -> None:
    _, envd = e2b.create()
    msg = {"process": {"cmd": "/bin/sh", "args": ["-c", "sleep 1; echo done; exit 3"]}}
    thread, answers = started(e2b, envd, msg, timeout_ms)
    thread.join(20)
    assert not thread.is_alive()
    said = events(answers[0])
    assert said[-1]["end"] == {
        "exited": True,
        "exitCode": 3,
        "status": "exit status 3",
        "error": "exit status 3",
    }


def test_a_deadline_that_is_no_number_is_refused_before_the_process_runs(
    e2b: E2bStand,
) -> None:
    _, envd = e2b.create()
    mark = e2b.scratch / "ran"
    msg = {"process": {"cmd": "touch", "args": [str(mark)]}}
    thread, answers = started(e2b, envd, msg, "soon")
    try:
        thread.join(15)
        assert not thread.is_alive()
    finally:
        kill_all(e2b, envd)
    envelopes = connect.EnvelopeReader().feed(answers[0].content)
    assert envelopes[-1].end and envelopes[-1].message["error"]["code"] == "invalid_argument"
    assert not mark.exists()
