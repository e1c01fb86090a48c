"""A computer made of a template with a readiness check answers running only once the check
passes in it (`readiness.settle`): the first request an agent sends is served. A check that
never passes is said, with what was waited for, how long, and the last answer; a template
without a check (or a built-in) is not waited for."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sanbox.control import readiness
from sanbox.host.door import AgentError
from sanbox.templates.spec import Ready

pytestmark = pytest.mark.unit


class Stream:
    async def close(self) -> None:
        return None


class Client:
    """An agent whose kernel lists a listener from the `listed`-th check on (never by default:
    each check dials), and whose dial is refused `refusals` times."""

    def __init__(self, refusals: int, listed: int | None = None) -> None:
        self.refusals, self.listed = refusals, listed
        self.dialled = self.asked = 0

    async def listening(self, port: int) -> bool:
        self.asked += 1
        return self.listed is not None and self.asked >= self.listed

    async def tcp(self, port: int) -> Stream:
        self.dialled += 1
        if self.dialled <= self.refusals:
            raise AgentError(f"connection to port {port} refused")
        return Stream()


class Guest:
    def __init__(
        self, refusals: int, isolation: str = "qemu-kvm", listed: int | None = None
    ) -> None:
        self.isolation = isolation
        self.agent = Client(refusals, listed)

    async def client(self, timeout: float = 10.0) -> Any:
        return self.agent


def settle(guest: Guest, ready: Ready | None) -> str | None:
    return asyncio.run(readiness.settle(guest, ready))


def test_it_waits_until_the_port_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readiness, "RETRY_EVERY", 0.001)
    guest = Guest(refusals=3)
    assert settle(guest, Ready(port=8642, timeout=60)) is None
    assert guest.agent.dialled == 4


def test_a_listed_listener_passes_without_a_dial(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readiness, "RETRY_EVERY", 0.001)
    guest = Guest(refusals=10**6, listed=3)  # listed at the third check; every dial refused
    assert settle(guest, Ready(port=8642, timeout=60)) is None
    assert (guest.agent.asked, guest.agent.dialled) == (3, 2)


def test_no_check_no_wait() -> None:
    guest = Guest(refusals=100)
    assert settle(guest, None) is None
    assert guest.agent.dialled == 0


def test_a_check_that_never_passes_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readiness, "RETRY_EVERY", 0.001)
    monkeypatch.setattr(readiness, "SETTLE_LIMIT", 0.05)
    why = settle(Guest(refusals=10**6, isolation="qemu-tcg"), Ready(port=8642, timeout=900))
    assert why is not None
    assert "port 8642 to answer" in why and "refused" in why and "waited 0s" in why


def test_the_wait_is_the_checks_timeout_scaled_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readiness, "RETRY_EVERY", 0.001)
    monkeypatch.setattr(readiness, "SETTLE_LIMIT", 10.0)
    why = settle(Guest(refusals=10**6), Ready(port=1, timeout=0.02))
    assert why is not None and "waited 0s" in why  # its own timeout, not the 10 s bound


def test_the_check_is_read_from_the_templates_spec() -> None:
    spec = 'name = "t"\nbase = "base"\n[ready]\nport = 8080\ntimeout = 30\n'
    assert readiness._ready_in("d1", spec) == Ready(port=8080, timeout=30)
    assert readiness._ready_in("d2", 'name = "t"\nbase = "base"\n') is None
