"""E2B's sandbox traffic is bounded as the API's is: every envd call (a process's Connect stream
here) holds an open request of its sandbox's token and its org's sandboxes from when its token is
checked to its end, so past the org's bound the next is refused 429 (Connect's
`resource_exhausted`), while the org's API keys, counted apart, are still served; a connection
to a public sandbox port holds one of its computer's public relays
(`SANBOX_PUBLIC_PORT_CONNECTIONS`), refused 429 past them; one to a port opened by the traffic
token holds an open request. Places come back when their requests end."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sanbox.e2b import connect
from sanbox.e2b.gateway import envd_of

from .conftest import E2bStand, e2b_stand

pytestmark = pytest.mark.component

PER_ORG = 3


@pytest.fixture
def bounded(short_tmp: Path) -> Iterator[E2bStand]:
    with e2b_stand(short_tmp, open_requests_per_org=PER_ORG, public_port_connections=2) as stand:
        yield stand


def until(what: str, check: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not {what} within {timeout} s"
        time.sleep(0.02)


def in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    answers: list[Any] = []
    thread = threading.Thread(target=lambda: answers.append(call()), daemon=True)
    thread.start()
    return thread, answers


def stream_call(e2b: E2bStand, envd: dict[str, str], method: str, msg: dict[str, Any]) -> Any:
    return lambda: e2b.client.post(
        f"/e2b-envd/process.Process/{method}",
        content=connect.envelope(msg),
        headers={**envd, "content-type": connect.STREAM_TYPE},
    )


def test_envd_streams_hold_the_org_s_open_requests(bounded: E2bStand) -> None:
    e2b = bounded
    sandbox, envd = e2b.create()
    computer = sandbox.replace("-", "_", 1)
    release = e2b.scratch / "release"
    wait = f"while [ ! -e {release} ]; do sleep 0.02; done"
    started = stream_call(
        e2b, envd, "Start", {"process": {"cmd": "/bin/sh", "args": ["-c", wait]}, "tag": "held"}
    )
    watched = stream_call(e2b, envd, "Connect", {"process": {"tag": "held"}})
    processes = envd_of(e2b.client.app.state).processes  # type: ignore[attr-defined]

    def watchers() -> int:
        return sum(len(r.watchers) for r in processes.of(computer))

    threads = [in_thread(started)]
    until("started", lambda: watchers() == 1)
    threads += [in_thread(watched) for _ in range(PER_ORG - 1)]
    until("watched", lambda: watchers() == PER_ORG)  # each holds its place: it watches
    third, answers = in_thread(watched)  # one more than the org's bound
    third.join(10)
    assert not third.is_alive(), "a Connect past the org's open requests was not refused"
    refused = answers[0]
    assert refused.status_code == 429, refused.text
    assert refused.json()["code"] == "resource_exhausted", refused.text
    assert "close some" in refused.json()["message"] and "Retry-After" in refused.headers
    assert e2b.client.get("/e2b-envd/health", headers=envd).status_code == 429
    by_key = e2b.client.get("/v1/computers", headers=e2b.v1)  # the org's keys count apart
    assert by_key.status_code == 200, "a sandbox's streams took its org's API from its keys"
    release.touch()  # the process ends: its streams with it
    for thread, _ in threads:
        thread.join(20)
        assert not thread.is_alive()
    assert all(answer.status_code == 200 for _, [answer] in threads)
    for _ in range(PER_ORG + 1):  # every place came back
        assert e2b.client.get("/e2b-envd/health", headers=envd).status_code == 204


@contextlib.contextmanager
def held_guest_port(held: int) -> Iterator[tuple[int, threading.Event, list[int]]]:
    """A port of the stand-in guest (this host) whose first `held` connections are answered only
    once the event is set, the others at once; with the count of connections accepted."""
    release = threading.Event()
    accepted: list[int] = [0]
    listener = socket.create_server(("127.0.0.1", 0))

    def answer(conn: socket.socket, wait: bool) -> None:
        with conn:
            conn.recv(65536)
            if wait:
                release.wait(30)
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted[0] += 1
            threading.Thread(target=answer, args=(conn, accepted[0] <= held), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield listener.getsockname()[1], release, accepted
    finally:
        release.set()
        listener.close()


@pytest.mark.parametrize("public", [True, False])
def test_a_sandbox_port_s_connections_are_bounded(bounded: E2bStand, public: bool) -> None:
    e2b = bounded
    held = 2 if public else PER_ORG  # the computer's public relays, or the org's open requests
    made = e2b.client.post(
        "/e2b/sandboxes",
        headers=e2b.api,
        json={"templateID": "base", "network": {"allowPublicTraffic": public}},
    )
    assert made.status_code == 201, made.text
    sandbox = made.json()["sandboxID"]
    token = {} if public else {"e2b-traffic-access-token": made.json()["trafficAccessToken"]}
    with held_guest_port(held) as (port, release, accepted):
        host = {"host": f"{port}-{sandbox}.localhost", **token}
        threads = [in_thread(lambda: e2b.client.get("/", headers=host)) for _ in range(held)]
        until("relayed", lambda: accepted[0] == held)
        refused = e2b.client.get("/", headers=host)
        assert refused.status_code == 429, refused.text
        assert refused.json()["code"] == 429 and "Retry-After" in refused.headers
        assert accepted[0] == held  # refused before the guest was dialled
        release.set()
        for thread, _ in threads:
            thread.join(20)
        assert [a.text for _, [a] in threads] == ["ok"] * held
        assert e2b.client.get("/", headers=host).text == "ok"  # the places came back
