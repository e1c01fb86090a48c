"""The sans-IO wire codec: frames in, bytes out, and back, whatever the chunking."""

from __future__ import annotations

import asyncio
import random
import struct

import pytest

from sanbox.guest import protocol as p
from sanbox.guest.flow import ReceiveWindow, SendWindow
from sanbox.host.agent.errors import (
    CommandNotFoundError,
    ExecError,
    FileNotFoundInGuestError,
    InvalidPathError,
    RemoteError,
    remote_error,
)

pytestmark = pytest.mark.unit

FRAMES: list[p.Frame] = [
    p.Hello({"nonce": "abc", "protocol": 1}),
    p.HelloAck({"nonce": "abc", "boot_id": "b", "uptime": 1.5}),
    p.Open(7, "exec", {"argv": ["echo", "hi"], "env": {"A": "1"}}),
    p.Data(7, p.STDIN, b"input\x00\xff"),
    p.Data(7, p.STDOUT, b""),
    p.Data(0xFFFFFFFF, p.STDERR, bytes(range(256)) * 3),
    p.Eof(7, p.STDIN),
    p.Msg(7, {"type": "exit", "exit_code": 137, "signal": 9, "timed_out": False}),
    p.Window(7, 1 << 20),
    p.Close(7),
]


def stream_bytes(frames: list[p.Frame]) -> bytes:
    return p.SYNC + b"".join(p.encode(f) for f in frames)


@pytest.mark.parametrize("frame", FRAMES, ids=lambda f: type(f).__name__)
def test_each_frame_round_trips(frame: p.Frame) -> None:
    assert p.Decoder().feed(p.SYNC + p.encode(frame)) == [frame]


def test_header_layout() -> None:
    raw = p.encode(p.Window(5, 1000))
    magic, ftype, reserved, stream, length = p.HEADER.unpack_from(raw)
    assert (magic, ftype, reserved, stream, length) == (p.MAGIC, p.FrameType.WINDOW, 0, 5, 4)
    assert raw[p.HEADER.size :] == struct.pack(">I", 1000)


def test_every_split_point_gives_the_same_frames() -> None:
    data = stream_bytes(FRAMES)
    for cut in range(len(data) + 1):
        decoder = p.Decoder()
        assert decoder.feed(data[:cut]) + decoder.feed(data[cut:]) == FRAMES, cut


def test_byte_at_a_time() -> None:
    decoder = p.Decoder()
    out: list[p.Frame] = []
    for byte in stream_bytes(FRAMES):
        out += decoder.feed(bytes([byte]))
    assert out == FRAMES


def test_random_chunking() -> None:
    data = stream_bytes(FRAMES) * 3
    rng = random.Random(7)
    for _ in range(50):
        decoder = p.Decoder()
        out: list[p.Frame] = []
        pos = 0
        while pos < len(data):
            step = rng.randint(1, 40)
            out += decoder.feed(data[pos : pos + step])
            pos += step
        assert out == FRAMES * 3


def test_hunting_decoder_skips_bytes_before_sync() -> None:
    garbage = b"SB\x06\x00\x00\x00\x00\x01\x00\x03\x00\x00" + bytes(range(256)) + p.SYNC[:5]
    decoder = p.Decoder()
    assert decoder.feed(garbage) == []
    assert decoder.hunting
    assert decoder.feed(stream_bytes(FRAMES)) == FRAMES


def test_sync_marker_split_across_feeds() -> None:
    decoder = p.Decoder()
    data = b"junk" + stream_bytes(FRAMES[:2])
    for cut in range(len(data)):
        decoder = p.Decoder()
        assert decoder.feed(data[:cut]) + decoder.feed(data[cut:]) == FRAMES[:2]


def test_sync_marker_between_frames_is_skipped() -> None:
    data = p.SYNC + p.encode(FRAMES[2]) + p.SYNC + p.SYNC + p.encode(FRAMES[3])
    assert p.Decoder().feed(data) == FRAMES[2:4]


def test_synced_decoder_needs_no_marker() -> None:
    assert p.Decoder(synced=True).feed(p.encode(p.Close(1))) == [p.Close(1)]


def test_strict_bad_magic_raises_then_hunts() -> None:
    decoder = p.Decoder()
    decoder.feed(p.SYNC)
    with pytest.raises(p.ProtocolError, match="magic"):
        decoder.feed(b"XX" + bytes(10))
    assert decoder.hunting
    assert decoder.feed(stream_bytes(FRAMES[:1])) == FRAMES[:1]


def test_lenient_resyncs_after_garbage() -> None:
    decoder = p.Decoder(lenient=True)
    data = stream_bytes(FRAMES[:3]) + b"garbage!" + stream_bytes(FRAMES[3:])
    assert decoder.feed(data) == FRAMES
    assert len(decoder.errors) == 1


def test_oversize_length_is_rejected_without_waiting() -> None:
    decoder = p.Decoder()
    decoder.feed(p.SYNC)
    header = p.HEADER.pack(p.MAGIC, p.FrameType.DATA, 0, 1, p.MAX_PAYLOAD + 1)
    with pytest.raises(p.ProtocolError, match="exceeds"):
        decoder.feed(header)


def test_max_payload_is_accepted() -> None:
    frame = p.Data(1, p.STDOUT, b"x" * (p.MAX_PAYLOAD - 1))
    assert p.Decoder().feed(p.SYNC + p.encode(frame)) == [frame]
    with pytest.raises(ValueError):
        p.encode(p.Data(1, p.STDOUT, b"x" * p.MAX_PAYLOAD))


def test_unknown_type_is_rejected() -> None:
    decoder = p.Decoder(lenient=True)
    bad = p.HEADER.pack(p.MAGIC, 99, 0, 1, 0)
    assert decoder.feed(p.SYNC + bad + p.SYNC + p.encode(p.Close(2))) == [p.Close(2)]
    assert "unknown frame type" in str(decoder.errors[0])


def test_bad_payload_drops_only_that_frame() -> None:
    decoder = p.Decoder(lenient=True)
    bad_json = p.HEADER.pack(p.MAGIC, p.FrameType.MSG, 0, 1, 5) + b"{nope"
    not_object = p.HEADER.pack(p.MAGIC, p.FrameType.MSG, 0, 1, 2) + b"[]"
    no_kind = p.HEADER.pack(p.MAGIC, p.FrameType.OPEN, 0, 1, 2) + b"{}"
    bad_window = p.HEADER.pack(p.MAGIC, p.FrameType.WINDOW, 0, 1, 1) + b"\x00"
    data = p.SYNC + bad_json + not_object + no_kind + bad_window + p.encode(p.Close(3))
    assert decoder.feed(data) == [p.Close(3)]
    assert len(decoder.errors) == 4
    assert all(isinstance(e, p.PayloadError) for e in decoder.errors)
    assert not decoder.hunting


def test_strict_bad_payload_raises_but_stays_in_sync() -> None:
    decoder = p.Decoder()
    with pytest.raises(p.PayloadError):
        decoder.feed(p.SYNC + p.HEADER.pack(p.MAGIC, p.FrameType.EOF, 0, 1, 0))
    assert decoder.feed(p.encode(p.Close(1))) == [p.Close(1)]


def test_reset_drops_partial_frame() -> None:
    decoder = p.Decoder()
    raw = p.encode(p.Msg(1, {"type": "x"}))
    decoder.feed(p.SYNC + raw[:7])
    decoder.reset()
    assert decoder.feed(raw) == []
    assert decoder.feed(p.SYNC + raw) == [p.Msg(1, {"type": "x"})]


@pytest.mark.parametrize(
    "path, ok",
    [
        ("/", True),
        ("/etc/hosts", True),
        ("/a/..b/c.", True),
        ("relative/x", False),
        ("", False),
        ("/a/../b", False),
        ("/..", False),
        ("/a/b/..", False),
        ("/nul\x00", False),
    ],
)
def test_path_problem(path: str, ok: bool) -> None:
    assert (p.path_problem(path) is None) == ok


def test_receive_window_grants_in_batches() -> None:
    window = ReceiveWindow(1000)
    grants = [window.consumed(100) for _ in range(10)]
    assert grants == [0, 0, 300, 0, 0, 300, 0, 0, 300, 0]


def test_send_window_blocks_until_granted() -> None:
    async def scenario() -> None:
        window = SendWindow(100)
        assert await window.take(60) == 60
        assert await window.take(60) == 40
        waiter = asyncio.ensure_future(window.take(10))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        window.grant(5)
        assert await waiter == 5
        window.refund(3)
        assert window.available == 3

    asyncio.run(scenario())


def test_error_codes_map_to_classes() -> None:
    not_found = remote_error({"type": "error", "code": "command_not_found", "message": "x"})
    assert isinstance(not_found, CommandNotFoundError) and isinstance(not_found, ExecError)
    assert not_found.exit_code == 127
    assert isinstance(remote_error({"code": "not_found"}), FileNotFoundInGuestError)
    assert isinstance(remote_error({"code": "invalid_path"}), InvalidPathError)
    other = remote_error({"code": "weird", "message": "m"})
    assert type(other) is RemoteError and (other.code, other.message) == ("weird", "m")
    assert type(remote_error({"code": "unknown_user"}, exec_stream=True)) is ExecError
