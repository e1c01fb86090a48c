"""The oldest E2B SDK release supported (2.45.1), unmodified, in a subprocess of its own: it is
installed with its own dependencies into a folder of the test data dir (once; kept for the next
runs), since its pins (connectrpc, pyqwest) differ from the newest's in this environment."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .conftest import E2bServer

pytestmark = pytest.mark.e2b
OLDEST = "2.45.1"

SCRIPT = textwrap.dedent(
    """
    import e2b, importlib.metadata as md, sys
    from e2b import Sandbox, CommandExitException
    from e2b.exceptions import SandboxNotFoundException, AuthenticationException
    assert md.version("e2b") == sys.argv[1], md.version("e2b")
    scratch = sys.argv[2]
    sbx = Sandbox.create("base", metadata={"suite": "oldest"}, timeout=60,
                         envs={"HOME": sys.argv[3]})
    out = sbx.commands.run("echo hi; echo there >&2", envs={"X": "1"})
    assert (out.stdout, out.stderr) == ("hi\\n", "there\\n"), out
    try:
        sbx.commands.run("exit 2")
        raise AssertionError("no CommandExitException")
    except CommandExitException as exc:
        assert exc.exit_code == 2
    bg = sbx.commands.run("sleep 60", background=True)
    assert sbx.commands.kill(bg.pid)
    sbx.files.write(scratch + "/old.txt", "from 2.45")
    assert sbx.files.read(scratch + "/old.txt") == "from 2.45"
    assert [e.name for e in sbx.files.list(scratch)] == ["old.txt"]
    sbx.set_timeout(120)
    assert sbx.get_info().state.value == "running"
    found = Sandbox.list(query=e2b.SandboxQuery(metadata={"suite": "oldest"})).next_items()
    assert [s.sandbox_id for s in found] == [sbx.sandbox_id]
    sbx.kill()
    assert not sbx.is_running()
    try:
        Sandbox.connect(sbx.sandbox_id)
        raise AssertionError("no SandboxNotFoundException")
    except SandboxNotFoundException:
        pass
    try:
        Sandbox.create("base", api_key="e2b_00ff")
        raise AssertionError("no AuthenticationException")
    except AuthenticationException:
        pass
    print("ok")
    """
)


def installed(version: str) -> Path:
    root = Path(os.environ.get("SANBOX_TEST_DATA_DIR", "/var/lib/sanbox-test"))
    target = root / "e2b-sdk" / version
    if (target / ".complete").exists():
        return target
    got = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--target",
            str(target),
            f"e2b=={version}",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if got.returncode != 0:
        pytest.skip(f"e2b {version} could not be installed: {got.stderr.strip()[-300:]}")
    (target / ".complete").touch()
    return target


def test_the_oldest_sdk(e2b_server: E2bServer) -> None:
    target = installed(OLDEST)
    scratch = Path(e2b_server.scratch) / "oldest"
    scratch.mkdir()
    env = {**os.environ, **e2b_server.env, "PYTHONPATH": str(target)}
    env["E2B_API_KEY"] = e2b_server.hex_key  # 2.45 refuses a key not shaped `e2b_<hex>`
    got = subprocess.run(
        [sys.executable, "-c", SCRIPT, OLDEST, str(scratch), e2b_server.envs["HOME"]],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert got.returncode == 0 and got.stdout.strip() == "ok", got.stderr[-3000:]
