"""E2B's sync SDK against Sanbox: commands, files, PTY, timeouts, list, kill, isolation, errors."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from e2b import Sandbox
from e2b.exceptions import AuthenticationException, SandboxNotFoundException

from .conftest import E2bServer

pytestmark = pytest.mark.e2b


@pytest.fixture(scope="module")
def sandbox(e2b_server: E2bServer) -> Iterator[Sandbox]:
    sbx = Sandbox.create("base", metadata={"suite": "sync"}, envs={"FROM_CREATE": "yes"})
    yield sbx
    sbx.kill()


def test_run_streams_exit_codes_env_and_cwd(sandbox: Sandbox) -> None:
    out = sandbox.commands.run("echo out; echo err >&2; echo $FROM_CREATE $ONE; pwd", envs={"ONE": "1"}, cwd="/tmp")
    assert out.exit_code == 0
    assert out.stdout == "out\nyes 1\n/tmp\n"
    assert out.stderr == "err\n"
