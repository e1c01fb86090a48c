"""A template's services in a real guest: init.sh runs the supervisor next to the agent; a
services.json written in the guest and a SIGHUP start the service, it answers on its port, logs to
its file, comes back when killed, and the agent's ``services`` control op reports it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from sanbox.host.runtime import Machine

pytestmark = pytest.mark.vm
Run = Callable[..., Any]

CONFIG = {
    "env": {"GREETING": "hello"},
    "services": [
        {
            "name": "web",
            "cwd": "/srv/site",
            "restart": "always",
            "command": 'echo "greeting=$GREETING"; '
            "exec python3 -m http.server 8080 --bind 127.0.0.1",
        }
    ],
}
ANSWERS = (
    "for i in $(seq 1 240); do curl -sf http://127.0.0.1:8080/index.txt && exit 0; sleep 0.5; done;"
    " exit 1"
)
LOG = "/var/log/sanbox/services/web.log"


def web_status(machine: Machine, run: Run, want: Callable[[dict[str, Any]], bool]) -> Any:
    """Ask the agent until the service's status is what ``want`` accepts (2 minutes at most)."""
    deadline = time.monotonic() + 120
    while True:
        statuses = run(machine.agent.services())
        status = next((s for s in statuses if s.get("name") == "web"), None)
        if status is not None and want(status):
            return status
        assert time.monotonic() < deadline, f"web never got there: {statuses}"
        time.sleep(0.2)


def test_a_service_runs_answers_logs_and_comes_back_when_killed(machine: Machine, run: Run) -> None:
    setup = "mkdir -p /etc/sanbox /srv/site && echo ok > /srv/site/index.txt && "
    config = json.dumps(CONFIG).encode()
    written = run(machine.agent.exec(setup + "cat > /etc/sanbox/services.json", stdin=config))
    assert written.exit_code == 0, written.stderr
    try:
        hup = run(machine.agent.exec(["pkill", "-HUP", "-f", "sanbox_guest.services"]))
        assert hup.exit_code == 0, "no supervisor running in the guest"
        answer = run(machine.agent.exec(ANSWERS), 200)
        assert (answer.exit_code, answer.stdout) == (0, b"ok\n")
        first = web_status(machine, run, lambda s: s["pid"] is not None)
        assert first["restarts"] == 0 and isinstance(first["pid"], int)
        log = run(machine.agent.exec(["cat", LOG])).stdout.decode()
        assert "greeting=hello" in log and "GET /index.txt" in log

        assert run(machine.agent.exec(["kill", "-9", str(first["pid"])])).exit_code == 0
        second = web_status(machine, run, lambda s: s["pid"] not in (None, first["pid"]))
        assert second["restarts"] == 1
        assert second["last_exit"] == {"code": None, "signal": 9}
        answer = run(machine.agent.exec(ANSWERS), 200)
        assert (answer.exit_code, answer.stdout) == (0, b"ok\n")
        log = run(machine.agent.exec(["cat", LOG])).stdout.decode()
        assert "[sanbox] web exited (signal 9), restarting in 0.5s" in log
    finally:  # the guest is shared with other tests: leave it without services
        run(machine.agent.exec("rm -f /etc/sanbox/services.json"))
        run(machine.agent.exec(["pkill", "-HUP", "-f", "sanbox_guest.services"]))
    deadline = time.monotonic() + 60
    while run(machine.agent.services()):
        assert time.monotonic() < deadline, "web was not stopped"
        time.sleep(0.2)
