"""The guest agent's errors as a tenant reads them: its own words where they name nothing of the
host's (a protocol violation), what to do where a dial's words name the socket's path (logged)."""

from __future__ import annotations

import logging

import pytest

from sanbox.control.errors import OperationTimeoutError, UnavailableError
from sanbox.control.host_errors import from_agent
from sanbox.host.door import AgentTimeoutError, AgentUnavailableError

pytestmark = pytest.mark.unit

SOCKET = "/var/lib/sanbox/computers/cmp_x/run/agent.sock"


def test_a_dial_s_words_are_logged_not_said(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    refused = AgentUnavailableError(f"cannot connect to agent at {SOCKET}", where=SOCKET)
    gone = from_agent(refused, "c")
    stuck = from_agent(AgentTimeoutError(f"agent at {SOCKET} did not complete", where=SOCKET), "c")
    assert isinstance(gone, UnavailableError) and isinstance(stuck, OperationTimeoutError)
    for error in (gone, stuck):
        assert SOCKET not in error.message and "restart the computer" in error.message
    assert sum(SOCKET in r.getMessage() for r in caplog.records) == 2


def test_words_that_name_nothing_of_the_host_are_said() -> None:
    error = from_agent(AgentUnavailableError("JSON payload nested deeper than 64"), "c")
    assert isinstance(error, UnavailableError) and "nested deeper" in error.message
    error = from_agent(AgentTimeoutError("exec: no answer in 30 s"), "c")
    assert isinstance(error, OperationTimeoutError) and "no answer in 30 s" in error.message
