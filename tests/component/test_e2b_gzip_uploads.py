"""A gzip upload through envd is written whole or not at all: a body of several members (`gzip -c
a b`) is the file's every byte; one cut short is refused 400 and the file stays as it was, no
temporary left beside it."""

from __future__ import annotations

import gzip
import os
import time

import pytest

from .conftest import E2bStand

pytestmark = pytest.mark.component


def upload(e2b: E2bStand, envd: dict[str, str], path: str, body: bytes) -> tuple[int, str]:
    r = e2b.client.post(
        "/e2b-envd/files",
        params={"path": path},
        content=body,
        headers={**envd, "Content-Type": "application/octet-stream", "Content-Encoding": "gzip"},
    )
    return r.status_code, r.text


def test_every_member_of_a_gzip_upload_is_written(e2b: E2bStand) -> None:
    _, envd = e2b.create()
    first, second = b"first\n" * 1000, os.urandom(300_000)
    target = e2b.scratch / "two-members"
    status, text = upload(e2b, envd, str(target), gzip.compress(first) + gzip.compress(second))
    assert status == 200, text
    assert target.read_bytes() == first + second


def test_a_gzip_upload_cut_short_is_refused_and_the_file_kept(e2b: E2bStand) -> None:
    _, envd = e2b.create()
    target = e2b.scratch / "kept"
    target.write_bytes(b"as it was")
    body = gzip.compress(os.urandom(600_000))
    status, text = upload(e2b, envd, str(target), body[: len(body) // 2])
    assert status == 400, text
    assert "ended inside a member" in text
    assert target.read_bytes() == b"as it was"
    deadline = time.monotonic() + 10  # the guest removes its temporary once told the write ended
    while [n for n in os.listdir(e2b.scratch) if n.startswith(".sanbox-put-")]:
        assert time.monotonic() < deadline, "the abandoned write's temporary stayed"
        time.sleep(0.05)
