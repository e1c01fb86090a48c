"""The guest agent sets CLOCK_REALTIME only in a VM: the component tier's stand-in (an agent
given a root of its own, running on the host's kernel) answers a clock set without touching the
host's clock."""

from __future__ import annotations

from typing import Any

import pytest

from sanbox.guest import control, ssh

pytestmark = pytest.mark.unit


class _Libc:
    def __init__(self) -> None:
        self.calls: list[Any] = []

    def clock_settime(self, clock: int, ts: Any) -> int:
        self.calls.append(clock)
        return 0


@pytest.fixture
def libc(monkeypatch: pytest.MonkeyPatch) -> _Libc:
    fake = _Libc()
    monkeypatch.setattr(control, "libc", lambda: fake)
    return fake


def test_outside_a_vm_the_hosts_clock_is_left_alone(
    libc: _Libc, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setenv(ssh.ROOT_ENV, str(tmp_path))
    control.set_clock(1.0)
    assert libc.calls == []


def test_in_a_vm_the_clock_is_set(libc: _Libc, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ssh.ROOT_ENV, raising=False)
    control.set_clock(1.0)
    assert libc.calls == [control.CLOCK_REALTIME]
