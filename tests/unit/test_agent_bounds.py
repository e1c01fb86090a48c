"""A hostile guest against the host's codec and per-stream buffers: nesting bombs, window
overruns, frame floods; and the output cap of a command run to completion."""

from __future__ import annotations

import json

import pytest

from sanbox.api.exec_schemas import ExecResponse
from sanbox.api.routes.exec import json_chunks
from sanbox.guest import protocol as p
from sanbox.host.agent import ExecResult, ProtocolError
from sanbox.host.agent.inbox import JOIN_LIMIT, MAX_CONTROL_FRAMES, Inbox
from sanbox.host.agent.process import Capture

pytestmark = pytest.mark.unit


def nested(depth: int) -> bytes:
    """A MSG body ``{"x": [[[...]]]}`` nested ``depth`` deep (the object counts as one)."""
    return b'{"x":' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"


def raw_frame(ftype: p.FrameType, stream: int, payload: bytes) -> bytes:
    return p.HEADER.pack(p.MAGIC, ftype, 0, stream, len(payload)) + payload


# -- JSON in frames -------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [33, 1_000, 10_000, p.MAX_PAYLOAD - 16])
def test_a_nesting_bomb_is_a_protocol_error_not_a_recursion_error(depth: int) -> None:
    payload = nested(depth)[: p.MAX_PAYLOAD]
    frames = p.SYNC + raw_frame(p.FrameType.MSG, 3, payload)
    decoder = p.Decoder()
    with pytest.raises(p.ProtocolError, match="nested deeper|bad JSON"):
        decoder.feed(frames)
    # the decoder stays in sync: the next frame decodes
    assert decoder.feed(p.encode(p.Msg(3, {"type": "exit"}))) == [p.Msg(3, {"type": "exit"})]


def test_nesting_up_to_the_limit_and_wide_bodies_pass() -> None:
    at_limit = nested(p.MAX_JSON_DEPTH)
    assert p.Decoder().feed(p.SYNC + raw_frame(p.FrameType.MSG, 1, at_limit))
    wide = {"entries": [{"name": str(i), "info": {"size": i}} for i in range(2_000)]}
    assert p.Decoder().feed(p.SYNC + p.encode(p.Msg(1, wide))) == [p.Msg(1, wide)]
    brackets_in_strings = {"text": "[" * 5_000 + "{" * 5_000}
    frame = p.Msg(1, brackets_in_strings)
    assert p.Decoder().feed(p.SYNC + p.encode(frame)) == [frame]


@pytest.mark.parametrize("ftype", [p.FrameType.HELLO_ACK, p.FrameType.OPEN, p.FrameType.MSG])
def test_every_json_frame_is_guarded(ftype: p.FrameType) -> None:
    with pytest.raises(p.ProtocolError):
        p.Decoder().feed(p.SYNC + raw_frame(ftype, 1, nested(5_000)))


def test_an_oversize_frame_is_refused_from_its_header() -> None:
    header = p.HEADER.pack(p.MAGIC, p.FrameType.MSG, 0, 1, p.MAX_PAYLOAD + 1)
    with pytest.raises(p.ProtocolError, match="exceeds"):
        p.Decoder().feed(p.SYNC + header)  # refused before any payload is buffered


# -- the receive window -----------------------------------------------------------------------


def data(n: int, channel: int = p.STDOUT, stream: int = 1) -> p.Data:
    return p.Data(stream, channel, b"x" * n)


def test_a_guest_sending_past_its_window_breaks_the_protocol() -> None:
    inbox = Inbox(window=1000)
    inbox.put(data(600))
    inbox.put(data(400))
    with pytest.raises(ProtocolError, match="window"):
        inbox.put(data(1))


def test_credit_the_host_granted_extends_the_window_and_nothing_more() -> None:
    inbox = Inbox(window=1000)
    inbox.put(data(1000))
    assert inbox.pop() == p.Data(1, p.STDOUT, b"x" * 1000)
    inbox.allow(500)  # the host wrote WINDOW(500) after consuming
    inbox.put(data(500))
    with pytest.raises(ProtocolError):
        inbox.put(data(1))


def test_what_waits_never_exceeds_the_window() -> None:
    inbox = Inbox()
    sent = 0
    with pytest.raises(ProtocolError):
        while True:
            inbox.put(data(p.CHUNK))
            sent += p.CHUNK
    assert inbox.buffered == sent == p.INITIAL_WINDOW


def test_one_byte_frames_are_joined_so_they_cannot_multiply_objects() -> None:
    inbox = Inbox()
    for i in range(200_000):
        inbox.put(p.Data(1, p.STDOUT if i % 2 else p.STDERR, b"y"))
    assert len(inbox) <= 2 * (200_000 // JOIN_LIMIT + 1)
    out = b"".join(inbox.pop().data for _ in range(len(inbox)))  # type: ignore[union-attr]
    assert out == b"y" * 200_000


def test_joining_never_moves_data_across_a_message() -> None:
    inbox = Inbox()
    inbox.put(data(3))
    inbox.put(p.Eof(1, p.STDERR))
    inbox.put(data(4))
    inbox.put(p.Msg(1, {"type": "exit"}))
    popped = [inbox.pop() for _ in range(len(inbox))]
    assert popped == [
        p.Data(1, p.STDOUT, b"xxx"),
        p.Eof(1, p.STDERR),
        p.Data(1, p.STDOUT, b"xxxx"),
        p.Msg(1, {"type": "exit"}),
    ]


def test_a_flood_of_messages_on_a_stream_breaks_the_protocol() -> None:
    inbox = Inbox()
    for _ in range(MAX_CONTROL_FRAMES):
        inbox.put(p.Msg(1, {"type": "noise"}))
    with pytest.raises(ProtocolError, match="waiting"):
        inbox.put(p.Msg(1, {"type": "noise"}))
    inbox.pop()  # the reader takes one: room for one more
    inbox.put(p.Msg(1, {"type": "noise"}))


# -- output kept from a command run to completion ---------------------------------------------


def test_capture_keeps_the_first_bytes_and_counts_the_rest() -> None:
    capture = Capture(10)
    for chunk in (b"0123", b"456789ab", b"cdef"):
        capture.add(chunk)
    assert (capture.value(), capture.truncated, capture.total) == (b"0123456789", True, 16)
    exact = Capture(4)
    exact.add(b"abcd")
    assert (exact.value(), exact.truncated) == (b"abcd", False)
    unlimited = Capture(None)
    unlimited.add(b"z" * 100)
    assert (unlimited.value(), unlimited.truncated) == (b"z" * 100, False)


@pytest.mark.parametrize("piece", [1, 2, 3, 7, 64 * 1024])
def test_the_streamed_json_is_the_response_model(piece: int) -> None:
    # NULs, quotes, backslashes, control bytes, multi-byte UTF-8 split anywhere, invalid bytes
    out = ('zero \x00 "q" \\ \n\t é 漢字 🙂 ' * 3).encode() + b"\xff\xfe bad \xe6\xbc"
    err = "é".encode()[:1]  # a truncated sequence at the very end
    result = ExecResult(3, out, err, 9, True, stdout_truncated=True, stderr_truncated=False)
    body = b"".join(json_chunks(result, piece))
    expected = ExecResponse(
        exit_code=3,
        stdout=out.decode(errors="replace"),
        stderr=err.decode(errors="replace"),
        signal=9,
        timed_out=True,
        stdout_truncated=True,
        stderr_truncated=False,
    )
    assert json.loads(body) == expected.model_dump()
    assert ExecResponse.model_validate_json(body) == expected


def test_the_streamed_json_of_empty_output() -> None:
    body = b"".join(json_chunks(ExecResult(0, b"", b"", None, False)))
    assert json.loads(body) == ExecResponse(exit_code=0, stdout="", stderr="").model_dump()
