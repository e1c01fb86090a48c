"""The initramfs's module list and the stripping of module signatures."""

from __future__ import annotations

import pytest

from sanbox.host.image.initramfs import MODULES, REQUIRED, SIGNATURE_MAGIC, strip_signature

pytestmark = pytest.mark.unit


def signed(body: bytes, signature: bytes) -> bytes:
    info = bytes([0, 0, 2, 0, 0, 0, 0, 0]) + len(signature).to_bytes(4, "big")
    return body + signature + info + SIGNATURE_MAGIC


def test_a_signed_module_loses_exactly_its_signature() -> None:
    body = b"\x7fELF" + bytes(range(256)) * 40
    assert strip_signature(signed(body, b"\x30\x82" + b"s" * 510)) == body


def test_unsigned_or_strange_modules_are_left_alone() -> None:
    body = b"\x7fELF" + b"x" * 100
    assert strip_signature(body) == body
    too_long = body + bytes(8) + (10**6).to_bytes(4, "big") + SIGNATURE_MAGIC
    assert strip_signature(too_long) == too_long


def test_modules_come_in_dependency_order() -> None:
    order = {name: i for i, name in enumerate(MODULES)}
    for before, after in [
        ("virtio_ring", "virtio"),
        ("virtio", "virtio_mmio"),
        ("virtio_mmio", "virtio_blk"),
        ("failover", "net_failover"),
        ("net_failover", "virtio_net"),
    ]:
        assert order[before] < order[after]
    assert set(REQUIRED) <= set(MODULES)
