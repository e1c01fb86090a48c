"""A usage report does not stall the server: it reads in a worker thread, so while one org's
report is under way (made slow here by a stand-in for the read) other requests are answered;
and an org's reports at once, and every org's, are bounded: past them the next is refused 429
`too_many_usage_reports` with `Retry-After` (the /v1 report, the CloudEvents feed and the
console's usage page alike), and the places come back when the reads end."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sanbox.control.usage import report

from .conftest import local_app

pytestmark = pytest.mark.component


def _h(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def slow_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[threading.Event, list[str]]]:
    """Every usage read waits for the event (30 s at most); the orgs of the reads begun."""
    release, begun = threading.Event(), []
    usage, events = report.usage, report.events

    def slow_usage(db: Any, org: Any, *args: Any) -> Any:
        begun.append(org.name)
        release.wait(30)
        return usage(db, org, *args)

    def slow_events(db: Any, orgs: Any, *args: Any) -> Any:
        begun.append("events")
        release.wait(30)
        return events(db, orgs, *args)

    monkeypatch.setattr(report, "usage", slow_usage)
    monkeypatch.setattr(report, "events", slow_events)
    yield release, begun
    release.set()


@pytest.fixture
def client(short_tmp: Path) -> Iterator[TestClient]:
    app, _ = local_app(short_tmp, usage_reports_per_org=1, usage_reports_total=2)
    with TestClient(app) as c:
        yield c


def in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    answers: list[Any] = []
    thread = threading.Thread(target=lambda: answers.append(call()), daemon=True)
    thread.start()
    return thread, answers


def until(what: str, check: Callable[[], bool]) -> None:
    done = threading.Event()
    for _ in range(500):  # 10 s at most
        if check():
            return
        done.wait(0.02)
    raise AssertionError(f"not {what}")


def refused(r: Any, whose: str) -> None:
    assert r.status_code == 429, r.text
    assert r.json()["error"]["code"] == "too_many_usage_reports", r.text
    assert whose in r.json()["error"]["message"] and "try again" in r.json()["error"]["message"]
    assert int(r.headers["Retry-After"]) > 0


def test_a_slow_report_stalls_no_one_and_reports_at_once_are_bounded(
    client: TestClient, slow_reads: tuple[threading.Event, list[str]]
) -> None:
    release, begun = slow_reads
    admin = client.app.state.first_key  # type: ignore[attr-defined]
    assert client.post("/v1/orgs", json={"name": "other"}, headers=_h(admin)).status_code == 201
    other = client.post("/v1/keys", json={"org": "other", "name": "o"}, headers=_h(admin))
    assert client.post("/v1/orgs", json={"name": "third"}, headers=_h(admin)).status_code == 201
    third = client.post("/v1/keys", json={"org": "third", "name": "t"}, headers=_h(admin))
    held = [in_thread(lambda: client.get("/v1/usage?group_by=day", headers=_h(admin)))]
    until("the report began", lambda: begun == ["default"])
    meanwhile, answers = in_thread(lambda: client.get("/v1/computers", headers=_h(admin)))
    meanwhile.join(10)  # the loop is free while the report reads
    assert not meanwhile.is_alive(), "a request waited for another's usage report"
    assert answers[0].status_code == 200, answers[0].text
    refused(client.get("/v1/usage", headers=_h(admin)), "this org has 1")
    refused(client.get("/v1/usage/events", headers=_h(admin)), "this org has 1")
    held.append(in_thread(lambda: client.get("/v1/usage", headers=_h(other.json()["key"]))))
    until("another org's report began", lambda: len(begun) == 2)
    refused(client.get("/v1/usage", headers=_h(third.json()["key"])), "the server has 2")
    release.set()
    for thread, _ in held:
        thread.join(20)
    assert [a.status_code for _, [a] in held] == [200, 200]
    for _ in range(3):  # the places came back
        assert client.get("/v1/usage", headers=_h(admin)).status_code == 200
        assert client.get("/v1/usage/events", headers=_h(admin)).status_code == 200


def test_the_console_s_usage_page_reads_within_the_org_s_bound(
    client: TestClient, slow_reads: tuple[threading.Event, list[str]]
) -> None:
    release, begun = slow_reads
    admin = client.app.state.first_key  # type: ignore[attr-defined]
    login = client.post(
        "/console/login",
        data={"key": admin},
        headers={"origin": "http://testserver"},
        follow_redirects=False,
    )
    assert login.status_code == 303, login.text
    page, answers = in_thread(lambda: client.get("/console/usage"))
    until("the page's report began", lambda: begun == ["default"])
    refused(client.get("/v1/usage", headers=_h(admin)), "this org has 1")
    release.set()
    page.join(20)
    assert answers[0].status_code == 200 and "vCPU-hours by day" in answers[0].text
