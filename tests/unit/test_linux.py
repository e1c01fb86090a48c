"""`sanbox.host.linux`: one handle on the C library, and work done inside a network namespace by
a thread of its own (the namespaces themselves: the integration and vm tiers, where the egress
gateway's listeners and the VMs' taps are opened through it)."""

from __future__ import annotations

import os
import threading

import pytest

from sanbox.host.linux import in_netns, libc


def test_the_c_library_is_loaded_once() -> None:
    assert libc() is libc()
    assert libc().getpid() == os.getpid()


def test_a_namespace_that_is_not_there_is_an_os_error_and_nothing_runs() -> None:
    ran: list[int] = []
    with pytest.raises(OSError):
        in_netns("sanbox-no-such-namespace", lambda: ran.append(1))
    assert not ran


def test_the_callers_thread_never_enters_the_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    """The work runs in another thread, and what it raises is raised here."""
    import sanbox.host.linux as linux

    entered: list[int] = []
    monkeypatch.setattr(linux, "_enter_netns", lambda _ns: entered.append(threading.get_ident()))
    assert in_netns("any", threading.get_ident) == entered[0] != threading.get_ident()
    with pytest.raises(ZeroDivisionError):
        in_netns("any", lambda: 1 // 0)
