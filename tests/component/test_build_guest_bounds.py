"""What a build reads of its guest is bounded: the guest runs the tenant's steps. Its dpkg status
made a link to /dev/zero is read no further than the limit (the server read it to its end, into
memory, before an apt step)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sanbox.host.agent import AgentClient, RemoteError

from .test_agent import AgentProcess, agent, run

pytestmark = pytest.mark.component
__all__ = ["agent"]  # the fixture, imported


def test_a_guest_file_that_never_ends_is_read_no_further_than_the_limit(
    agent: AgentProcess, tmp_path: Path
) -> None:
    status = tmp_path / "status"
    status.symlink_to("/dev/zero")

    async def body(client: AgentClient) -> None:
        with pytest.raises(RemoteError, match="over 1 MiB") as refused:
            await client.files.read(str(status), most=2**20)
        assert refused.value.code == "file_too_large"
        (tmp_path / "small").write_bytes(b"Package: jq\n")
        small = str(tmp_path / "small")
        assert await client.files.read(small, most=2**20) == b"Package: jq\n"

    run(agent, body, limit=30)
