"""`sanbox cp` whose local side fails (a folder that is not there, a file that is not) says so in
one line naming the local path, exit 1, the quick way and the typer app's: never a traceback,
never "cannot reach the server" for a server that answered."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sanbox import Sanbox

from .conftest import LiveServer

pytestmark = pytest.mark.component

ENTRY = "import sys; sys.argv[0] = 'sanbox'; from sanbox.cli.main import main; main()"


def test_a_local_file_that_fails_is_one_line_naming_it(
    live_server: LiveServer, short_tmp: Path
) -> None:
    env = {
        **os.environ,
        "SANBOX_URL": live_server.url,
        "SANBOX_API_KEY": live_server.key,
        "SANBOX_CONFIG": str(short_tmp / "absent.toml"),
    }
    missing = short_tmp / "no-such-folder"
    with Sanbox(live_server.url, live_server.key) as client:
        client.computers.create(name="copied")
        for eager in ("", "1"):
            for args, local in (
                (["copied:/etc/hostname", str(missing / "x")], missing / "x"),
                ([str(missing / "y"), "copied:/tmp/y"], missing / "y"),
            ):
                proc = subprocess.run(
                    [sys.executable, "-c", ENTRY, "cp", *args],
                    env={**env, "SANBOX_CLI_EAGER": eager},
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                said = proc.stderr.strip()
                assert proc.returncode == 1, (eager, args, proc.stderr)
                assert len(said.splitlines()) == 1 and str(local) in said, (eager, args, said)
                assert "reach" not in said and "Traceback" not in said, said
        client.computers.get("copied").delete()


def test_a_copy_into_a_folder_named_without_its_slash_lands_in_it(
    live_server: LiveServer, short_tmp: Path
) -> None:
    """`sanbox cp notes.txt NAME:/root` where /root is a folder: into it, as cp and scp do (it
    was refused `is_a_directory`), the quick way and the typer app's."""
    env = {
        **os.environ,
        "SANBOX_URL": live_server.url,
        "SANBOX_API_KEY": live_server.key,
        "SANBOX_CONFIG": str(short_tmp / "absent.toml"),
    }
    local = short_tmp / "notes.txt"
    local.write_text("kept\n")
    with Sanbox(live_server.url, live_server.key) as client:
        client.computers.create(name="folders")
        for eager in ("", "1"):
            folder = short_tmp / f"into{eager}"  # the stand-in's guests share this host's files
            folder.mkdir()
            proc = subprocess.run(
                [sys.executable, "-c", ENTRY, "cp", str(local), f"folders:{folder}"],
                env={**env, "SANBOX_CLI_EAGER": eager},
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert proc.returncode == 0, (eager, proc.stderr)
            assert (folder / "notes.txt").read_text() == "kept\n"
        client.computers.get("folders").delete()
