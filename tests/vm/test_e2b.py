"""E2B's SDK against a real server with real guests: what the component stand-in cannot show.
E2B's default user made on first use in `base` (`user`, /home/user, bash), root through
`user="root"`, and a pause with memory that keeps a running process across `connect`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from e2b import Sandbox

from .server import ServerProcess

pytestmark = [pytest.mark.vm, pytest.mark.e2b]


@pytest.fixture
def e2b_env(server: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("E2B_API_KEY", server.key)
    monkeypatch.setenv("E2B_API_URL", f"{server.url}/e2b")
    monkeypatch.setenv("E2B_SANDBOX_URL", f"{server.url}/e2b-envd")
    yield


def test_default_user_root_and_pause_with_a_process_kept(e2b_env: None) -> None:
    sbx = Sandbox.create("base", timeout=600)
    try:
        me = sbx.commands.run('whoami; pwd; echo "$HOME"; echo "$SHELL"')
        assert me.stdout == "user\n/home/user\n/home/user\n/bin/bash\n"
        assert sbx.commands.run("whoami", user="root").stdout == "root\n"
        sbx.files.write("notes.txt", "kept")  # relative: under the user's home
        assert sbx.commands.run("stat -c %U /home/user/notes.txt").stdout == "user\n"

        # a process of its own session: a command's own process ends with its agent session,
        # which a pause ends (docs/e2b.md, "What differs")
        sleeper = sbx.commands.run("setsid sleep 600 > /dev/null 2>&1 & echo $!").stdout.strip()
        sbx.pause()
        assert not sbx.is_running()
        assert Sandbox.get_info(sbx.sandbox_id).state.value == "paused"
        again = Sandbox.connect(sbx.sandbox_id)
        assert again.is_running()
        assert again.commands.run(f"kill -0 {sleeper} && echo alive").stdout == "alive\n"
        assert again.files.read("/home/user/notes.txt") == "kept"
    finally:
        Sandbox.kill(sbx.sandbox_id)
