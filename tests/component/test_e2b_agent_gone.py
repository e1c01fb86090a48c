"""A guest agent that cannot be reached (a tenant killed it, or took its channel) is said to the
tenant without the host's details: the answer (`/e2b` envd, `/v1`) names no path of the server's
data dir; the detail goes to the server's log."""

from __future__ import annotations

import logging
import socket

import pytest

from .conftest import E2bStand

pytestmark = pytest.mark.component


def test_an_unreachable_agent_is_said_without_host_paths(
    e2b: E2bStand, caplog: pytest.LogCaptureFixture
) -> None:
    sandbox, envd = e2b.create()
    computer = sandbox.replace("-", "_", 1)
    agent = e2b.data_dir.computer(computer).run / "agent.sock"
    assert agent.exists()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as thief:
        thief.connect(str(agent))  # the agent serves the newest connection: the server's ends
        agent.unlink()  # and the server cannot dial it again
        caplog.set_level(logging.WARNING)
        answers = [
            e2b.client.post(  # its first envd call: the default user looked up as root
                "/e2b-envd/filesystem.Filesystem/Stat", json={"path": "/"}, headers=envd
            ),
            e2b.client.post(f"/v1/computers/{computer}/exec", headers=e2b.v1, json={"cmd": "true"}),
        ]
    for r in answers:
        assert r.status_code in (503, 504), r.text
        assert str(e2b.data_dir.root) not in r.text and "agent.sock" not in r.text, r.text
        assert "guest agent" in r.text, r.text
    assert any("agent.sock" in rec.getMessage() for rec in caplog.records)  # for the operator
