"""A file written over through the API (the SDK, `sanbox cp`, MCP, E2B's `files.write`) keeps its
mode and owner unless a mode is given: an agent that edits its script can still run it (it
became 0644). A new file is 0644, or the mode given; so is one in a folder anyone may write
(/tmp), where another user could have planted it to own what root writes next."""

from __future__ import annotations

from pathlib import Path

import pytest

from sanbox import Sanbox

from .conftest import LiveServer

pytestmark = pytest.mark.component


def test_a_file_written_over_keeps_its_mode_unless_one_is_given(
    live_server: LiveServer, tmp_path: Path
) -> None:
    script = str(tmp_path / "run.sh")  # the stand-in's guests share this host's files
    with Sanbox(live_server.url, live_server.key, timeout=60) as client:
        c = client.computers.create(name="writes", idle_timeout=0)
        c.files.write(script, "#!/bin/sh\necho one\n")
        assert c.exec(["stat", "-c", "%a", script]).stdout == "644\n"
        c.exec(["chmod", "750", script])
        c.files.write(script, "#!/bin/sh\necho two\n")
        assert c.exec(["stat", "-c", "%a", script]).stdout == "750\n"
        assert c.exec([script]).stdout == "two\n"
        c.files.write(script, "echo three\n", mode=0o600)
        assert c.exec(["stat", "-c", "%a", script]).stdout == "600\n"
        shared = tmp_path / "shared"  # a folder anyone writes (/tmp): a file planted there
        shared.mkdir(mode=0o1777)
        shared.chmod(0o1777)
        planted = shared / "setup.sh"
        planted.write_text("planted\n")
        planted.chmod(0o777)
        c.files.write(str(planted), "written by root\n")
        assert c.exec(["stat", "-c", "%a", str(planted)]).stdout == "644\n"  # nothing kept
        c.delete()
