"""Files through E2B's sync SDK as envd does them: a multipart upload streamed to the guest as it
arrives, a read of a file that changes meanwhile, removing what is not there, rename into new
folders, `~` and `..` in paths, and the folders a call makes owned by the call's user."""

from __future__ import annotations

import io
import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from e2b import Sandbox
from e2b.exceptions import InvalidArgumentException

from .conftest import E2bServer
from .test_sync import wait_until

pytestmark = pytest.mark.e2b
MIB = 2**20


def _put_temporaries(folder: Path) -> int:
    """Bytes the guest agent has written so far into its temporaries in `folder`."""
    return sum(p.stat().st_size for p in folder.glob(".sanbox-put-*"))


def test_a_multipart_upload_reaches_the_guest_as_it_arrives(
    sandbox: Sandbox, e2b_server: E2bServer
) -> None:
    folder = Path(e2b_server.scratch, "streamed")
    boundary = "sanbox-test-boundary"
    head = (
        f"--{boundary}\r\n"
        f'Content-Disposition: form-data; name="file"; filename="{folder}/big.bin"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()

    def body() -> Iterator[bytes]:
        yield head + b"a" * MIB
        # the server holds no more than a window of it: the guest has the first bytes before
        # the rest is sent (a server that spooled the body first would wait here for ever)
        wait_until(lambda: folder.is_dir() and _put_temporaries(folder) > 0)
        yield b"b" * MIB + f"\r\n--{boundary}--\r\n".encode()

    answer = httpx.post(
        f"{e2b_server.url}/e2b-envd/files",
        content=body(),
        headers={
            "Content-Type": f"multipart/form-data; boundary={boundary}",
            "X-Access-Token": sandbox._envd_access_token or "",
            "E2b-Sandbox-Id": sandbox.sandbox_id,
        },
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json() == [{"path": f"{folder}/big.bin", "name": "big.bin", "type": "file"}]
    assert (folder / "big.bin").read_bytes() == b"a" * MIB + b"b" * MIB
    assert _put_temporaries(folder) == 0


def test_several_files_in_one_multipart_upload(sandbox: Sandbox, e2b_server: E2bServer) -> None:
    base = f"{e2b_server.scratch}/several"
    written = sandbox.files.write_files(
        [
            {"path": f"{base}/one/a.txt", "data": "first"},
            {"path": f"{base}/two/b.bin", "data": b"\x00second"},
        ]
    )
    assert [w.path for w in written] == [f"{base}/one/a.txt", f"{base}/two/b.bin"]
    assert sandbox.files.read(f"{base}/one/a.txt") == "first"
    assert bytes(sandbox.files.read(f"{base}/two/b.bin", format="bytes")) == b"\x00second"


def test_a_file_read_while_it_grows_and_shrinks(sandbox: Sandbox, e2b_server: E2bServer) -> None:
    path = f"{e2b_server.scratch}/changing.txt"
    writer = sandbox.commands.run(
        f"l=$(printf %01023d 0); while :; do for i in $(seq 256); do echo $l >> {path}; done;"
        f" : > {path}; done",
        background=True,
    )
    try:
        wait_until(lambda: sandbox.files.exists(path))
        for _ in range(20):  # each read races the writer's appends and truncations
            assert set(sandbox.files.read(path)) <= {"0", "\n"}
    finally:
        writer.kill()


def test_removing_what_is_not_there_succeeds(sandbox: Sandbox, e2b_server: E2bServer) -> None:
    sandbox.files.remove(f"{e2b_server.scratch}/never-made")
    sandbox.files.remove(f"{e2b_server.scratch}/never-made/below")


def test_rename_makes_the_destinations_folders(sandbox: Sandbox, e2b_server: E2bServer) -> None:
    base = f"{e2b_server.scratch}/renamed"
    sandbox.files.write(f"{base}/a.txt", "moving")
    moved = sandbox.files.rename(f"{base}/a.txt", f"{base}/new/deeper/b.txt")
    assert moved.path == f"{base}/new/deeper/b.txt"
    assert sandbox.files.read(f"{base}/new/deeper/b.txt") == "moving"
    assert not sandbox.files.exists(f"{base}/a.txt")


def test_tilde_and_dot_dot_are_resolved_as_envd_does(
    sandbox: Sandbox, e2b_server: E2bServer
) -> None:
    home = "/root"  # the stand-in guest's default user is root (conftest)
    scratch = e2b_server.scratch.lstrip("/")
    assert sandbox.files.get_info("~").path == home
    assert sandbox.files.get_info("~/").path == home
    written = sandbox.files.write(f"~/../{scratch}/tilde/./a.txt", "via ~")
    assert written.path == f"/{scratch}/tilde/a.txt"
    assert sandbox.files.read(f"/{scratch}/tilde/x/../a.txt") == "via ~"
    relative = f"../{scratch}/tilde/a.txt"  # under the home, then resolved
    assert sandbox.files.get_info(relative).path == f"/{scratch}/tilde/a.txt"
    with pytest.raises(InvalidArgumentException):
        sandbox.files.read("~nobody/a.txt")  # envd: "cannot expand user-specific home dir"
    with pytest.raises(InvalidArgumentException):
        sandbox.files.write("~nobody/a.txt", "x")


@pytest.fixture
def open_folder() -> Iterator[Path]:
    """A folder of root's that any user may enter (the scratch folder is root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="sbe-open-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.skipif(not any(u.pw_name == "nobody" for u in pwd.getpwall()), reason="no nobody")
def test_folders_made_for_a_user_are_the_users(sandbox: Sandbox, open_folder: Path) -> None:
    """The stand-in guest is this host: its `nobody` is a user other than root."""
    nobody = pwd.getpwnam("nobody").pw_uid
    base = open_folder
    sandbox.files.write(f"{base}/w/x/file.txt", "x", user="nobody")
    sandbox.files.write(f"{base}/m/y/streamed.bin", io.BytesIO(b"y"), user="nobody")
    assert sandbox.files.make_dir(f"{base}/d/e/f", user="nobody")
    owned = ["w", "w/x", "w/x/file.txt", "m", "m/y", "m/y/streamed.bin", "d", "d/e", "d/e/f"]
    assert {p: os.stat(base / p).st_uid for p in owned} == dict.fromkeys(owned, nobody)
    sandbox.files.rename(f"{base}/w/x/file.txt", f"{base}/w/r/s/file.txt", user="nobody")
    owned = ["w/r", "w/r/s", "w/r/s/file.txt"]
    assert {p: os.stat(base / p).st_uid for p in owned} == dict.fromkeys(owned, nobody)
    assert os.stat(base).st_uid == 0  # there before: left as it was
