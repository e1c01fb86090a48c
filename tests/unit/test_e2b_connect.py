"""The Connect framing E2B's SDK speaks to envd (sans-IO), the sandbox ids and tokens, the
gateway's host names and the error tables."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from sanbox.control.errors import (
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    UnavailableError,
)
from sanbox.e2b import connect, identity
from sanbox.e2b.errors import connect_error, rest_error
from sanbox.e2b.gateway import parse_host

pytestmark = pytest.mark.unit


def test_envelopes_round_trip_in_any_pieces() -> None:
    wire = connect.envelope({"event": {"start": {"pid": 7}}}) + connect.end_stream()
    assert wire[:1] == b"\x00" and struct.unpack(">I", wire[1:5])[0] == len(wire) - 5 - 7
    reader = connect.EnvelopeReader()
    got = [e for i in range(len(wire)) for e in reader.feed(wire[i : i + 1])]
    assert [(e.end, e.message) for e in got] == [
        (False, {"event": {"start": {"pid": 7}}}),
        (True, {}),
    ]


def test_the_end_of_a_stream_carries_its_error() -> None:
    wire = connect.end_stream(connect.ConnectError("not_found", "no such process"))
    (end,) = connect.EnvelopeReader().feed(wire)
    assert end.flags == connect.END_STREAM
    assert end.message == {"error": {"code": "not_found", "message": "no such process"}}


@pytest.mark.parametrize(
    ("header", "why"),
    [
        (struct.pack(">BI", 0, connect.MAX_MESSAGE + 1), "too big"),
        (struct.pack(">BI", connect.COMPRESSED, 2), "compressed"),
    ],
)
def test_hostile_envelopes_are_refused(header: bytes, why: str) -> None:
    with pytest.raises(connect.ConnectError, match=why):
        connect.EnvelopeReader().feed(header + b"{}")


def test_a_request_is_json_in_either_content_type() -> None:
    assert connect.first_message(b'{"path":"/a"}', "application/json") == {"path": "/a"}
    assert connect.first_message(b"", "application/json") == {}
    framed = connect.envelope({"process": {"cmd": "ls"}})
    assert connect.first_message(framed, "application/connect+json") == {"process": {"cmd": "ls"}}
    with pytest.raises(connect.ConnectError):
        connect.first_message(framed + framed, "application/connect+json")
    with pytest.raises(connect.ConnectError):
        connect.first_message(b"[1]", "application/json")


def test_sandbox_ids_are_dns_labels_that_name_one_computer() -> None:
    assert identity.sandbox_id("cmp_ab12cd34ef56") == "cmp-ab12cd34ef56"
    assert identity.computer_id("cmp-ab12cd34ef56") == "cmp_ab12cd34ef56"
    for bad in ("cmp_ab12cd34ef56", "cmp-AB12cd34ef56", "cmp-ab12", "x", "cmp-ab12cd34ef56."):
        assert identity.computer_id(bad) is None


def test_tokens_open_one_computer(tmp_path: Path) -> None:
    tokens = identity.Tokens(tmp_path / "secret.key")
    a, b = tokens.envd("cmp_a"), tokens.envd("cmp_b")
    assert a != b and tokens.envd_matches("cmp_a", a) and not tokens.envd_matches("cmp_b", a)
    assert tokens.traffic("cmp_a") not in (a, b)


def test_gateway_host_names() -> None:
    assert parse_host("49983-cmp-ab12cd34ef56.e2b.example.com", "e2b.example.com") == (
        49983,
        "cmp-ab12cd34ef56",
    )
    assert parse_host("8080-cmp-ab12cd34ef56.localhost:8443", "localhost:8443") == (
        8080,
        "cmp-ab12cd34ef56",
    )
    for host in (
        "49983-cmp-ab12cd34ef56.other.com",
        "49983-web.e2b.example.com",  # a published port's name, not a sandbox
        "99999-cmp-ab12cd34ef56.e2b.example.com",
        "x.49983-cmp-ab12cd34ef56.e2b.example.com",
    ):
        assert parse_host(host, "e2b.example.com") is None


def test_error_tables() -> None:
    assert rest_error(NotFoundError("gone")) == (404, {"code": 404, "message": "gone"})
    assert rest_error(InvalidRequestError("bad"))[0] == 400
    assert connect_error(NotFoundError("x")).code == "not_found"
    assert connect_error(ConflictError("x", "name_taken")).code == "already_exists"
    assert connect_error(ConflictError("x")).code == "failed_precondition"
    assert connect_error(UnavailableError("wait")).code == "unavailable"
    assert connect_error(InvalidRequestError("x", "too_many_watches")).code == "resource_exhausted"


def test_a_lifetime_that_pauses_pauses_a_running_computer_once() -> None:
    from datetime import UTC, datetime, timedelta

    from sanbox.control import deadlines
    from sanbox.store.models import ComputerRow

    now = datetime.now(UTC)
    row = ComputerRow(
        state="running",
        lifetime=5,
        on_lifetime="pause",
        max_running=0,
        created_at=now - timedelta(seconds=6),
        started_at=now - timedelta(seconds=6),
    )
    assert deadlines.due(row, now)[0] == "pause"  # type: ignore[index]
    row.state = "paused"
    assert deadlines.due(row, now) is None  # its memory is kept until it is resumed
    row.state, row.lifetime = "running", 60
    assert deadlines.due(row, now) is None
