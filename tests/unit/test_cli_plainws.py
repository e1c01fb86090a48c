"""The fast exec's own WebSocket client (sanbox.cli.plainws): its frames and handshake key are
RFC 6455's (the RFC's own examples), whatever the payload's length."""

from __future__ import annotations

import struct

from sanbox.cli.plainws import BINARY, TEXT, accept_key, frame


def unmask(data: bytes) -> tuple[int, bytes]:
    """(opcode, payload) of one final masked frame."""
    assert data[0] & 0x80 and data[1] & 0x80
    n, at = data[1] & 0x7F, 2
    if n == 126:
        n, at = struct.unpack("!H", data[2:4])[0], 4
    elif n == 127:
        n, at = struct.unpack("!Q", data[2:10])[0], 10
    mask, payload = data[at : at + 4], data[at + 4 :]
    assert len(payload) == n
    return data[0] & 0x0F, bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def test_the_rfcs_masked_hello() -> None:
    assert frame(TEXT, b"Hello", bytes.fromhex("37fa213d")) == bytes.fromhex(
        "818537fa213d7f9f4d5158"
    )


def test_the_rfcs_accept_key() -> None:
    assert accept_key(b"dGhlIHNhbXBsZSBub25jZQ==") == b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def test_each_length_form_carries_its_payload() -> None:
    for n in (0, 1, 125, 126, 65535, 65536, 200_000):
        payload = bytes(i % 251 for i in range(n))
        assert unmask(frame(BINARY, payload, b"\x01\x02\x03\x04")) == (BINARY, payload)
