"""Snapshot logic without a host: which layers may go, when a chain must be flattened, what a
snapshot manifest accepts, how a qcow2 header names its backing file, and the guest's checks of
a new identity."""

from __future__ import annotations

import base64
import dataclasses
import json
import struct

import pytest

from sanbox.guest.errors import AgentRequestError
from sanbox.guest.identity import check_machine_id, decode_entropy, entropy_request
from sanbox.host.disk.errors import DiskError
from sanbox.host.disk.layers import MAX_CHAIN, needs_flatten, unreferenced
from sanbox.host.disk.qcow2 import parse_backing, parse_virtual_size
from sanbox.host.snapshot import SnapshotCorruptError, SnapshotManifest
from sanbox.host.snapshot import manifest as mf

pytestmark = pytest.mark.unit
KEY = b"k" * 32


def test_layers_under_a_root_are_kept_and_the_rest_go() -> None:
    # a <- b <- c (c on b on a), d on a, e alone; the snapshot holds c, a computer stands on d
    graph = {"a": None, "b": "a", "c": "b", "d": "a", "e": None}
    assert unreferenced(graph, ["c", "d"]) == {"e"}
    assert unreferenced(graph, ["d"]) == {"b", "c", "e"}
    assert unreferenced(graph, []) == set(graph)


def test_a_root_that_is_not_a_layer_keeps_nothing_and_breaks_nothing() -> None:
    graph = {"a": None, "b": "a"}
    assert unreferenced(graph, ["gone", "b"]) == set()
    # a cycle (a damaged header) must not loop forever
    assert unreferenced({"x": "y", "y": "x", "z": None}, ["x"]) == {"z"}


def test_a_layer_below_a_kept_one_is_kept_even_if_its_own_root_went() -> None:
    graph = {"base": None, "mid": "base", "top": "mid"}
    assert "base" not in unreferenced(graph, ["top"])


def test_chains_are_flattened_before_a_computer_on_them_would_pass_the_bound() -> None:
    assert not needs_flatten(MAX_CHAIN - 1)  # a computer on it: MAX_CHAIN long, allowed
    assert needs_flatten(MAX_CHAIN)
    depth, depths = 0, []
    for _ in range(20):  # 20 generations, each a layer on the last, flattened when needed
        depth = 1 if needs_flatten(depth + 1) else depth + 1
        depths.append(depth + 1)  # the next computer's chain
    assert max(depths) <= MAX_CHAIN


def manifest(**kw: object) -> SnapshotManifest:
    fields: dict[str, object] = dict(
        id="snp_abc123",
        computer_id="cmp1",
        layer="lyr_" + "0" * 32,
        layer_digest="d" * 64,
        disk_bytes=2**30,
        memory=True,
        image="build1",
        vcpus=1,
        memory_mib=512,
        size_bytes=123,
        paused_seconds=0.1,
        created_at=1.0,
    )
    fields.update(kw)
    return SnapshotManifest(**fields)  # type: ignore[arg-type]


def test_a_genuine_manifest_reads_back() -> None:
    snap = manifest()
    back = mf.parse(mf.render(snap, KEY), snap.id, KEY)
    assert back.mac and dataclasses.replace(back, mac="") == snap


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda d: d.update(memory=False), "manifest was changed"),
        (lambda d: d.update(layer="lyr_" + "1" * 32), "manifest was changed"),
        (lambda d: d.pop("mac"), "has no MAC"),
        (lambda d: d.update(extra=1), "manifest was changed"),
    ],
)
def test_a_changed_manifest_is_refused_with_the_reason(change: object, words: str) -> None:
    data = json.loads(mf.render(manifest(), KEY))
    change(data)  # type: ignore[operator]
    with pytest.raises(SnapshotCorruptError, match=words) as err:
        mf.parse(json.dumps(data), "snp_abc123", KEY)
    assert err.value.reason == "corrupt"


def test_a_manifest_from_another_host_or_another_snapshot_is_refused() -> None:
    text = mf.render(manifest(), KEY)
    with pytest.raises(SnapshotCorruptError, match="another host"):
        mf.parse(text, "snp_abc123", b"x" * 32)
    with pytest.raises(SnapshotCorruptError, match="snp_abc123's"):
        mf.parse(text, "snp_other1", KEY)
    with pytest.raises(SnapshotCorruptError, match="unreadable"):
        mf.parse(text[:-5], "snp_abc123", KEY)


def test_gc_reads_the_layer_of_a_damaged_manifest_too() -> None:
    data = json.loads(mf.render(manifest(), KEY))
    data["mac"] = "bogus"
    assert mf.layer_named(json.dumps(data)) == "lyr_" + "0" * 32
    assert mf.layer_named("not json") is None


def header(backing: bytes | None, magic: bytes = b"QFI\xfb") -> bytes:
    offset, size = (0, 0) if backing is None else (512, len(backing))
    head = bytearray(struct.pack(">4sIQI", magic, 3, offset, size)) + bytes(1024)
    if backing is not None:
        head[512 : 512 + len(backing)] = backing
    return bytes(head)


def test_qcow2_backing_name_from_the_header() -> None:
    assert parse_backing(header(b"/data/layers/lyr_1.qcow2")) == "/data/layers/lyr_1.qcow2"
    assert parse_backing(header(None)) is None
    with pytest.raises(DiskError, match="bad magic"):
        parse_backing(header(b"/x", magic=b"RAW!"))
    with pytest.raises(DiskError, match="out of range"):
        parse_backing(struct.pack(">4sIQI", b"QFI\xfb", 3, 10_000, 20) + bytes(100))


def test_qcow2_virtual_size_from_the_header() -> None:
    head = bytearray(header(None))
    head[24:32] = (20 * 1024**3).to_bytes(8, "big")
    assert parse_virtual_size(bytes(head)) == 20 * 1024**3
    with pytest.raises(DiskError, match="bad magic"):
        parse_virtual_size(header(None, magic=b"RAW!"))
    with pytest.raises(DiskError, match="too short"):
        parse_virtual_size(b"QFI\xfb" + bytes(10))


def test_new_identity_inputs_are_checked_by_the_guest() -> None:
    data = bytes(range(64))
    assert decode_entropy(base64.b64encode(data).decode()) == data
    for bad in (None, "***", base64.b64encode(b"short").decode()):
        with pytest.raises(AgentRequestError):
            decode_entropy(bad)
    assert check_machine_id("0123456789abcdef0123456789abcdef")
    for bad_id in ("../../etc/passwd", "0123", "0123456789ABCDEF0123456789ABCDEF", 5):
        with pytest.raises(AgentRequestError):
            check_machine_id(bad_id)


def test_entropy_request_is_the_kernels_rand_pool_info() -> None:
    req = entropy_request(b"\x01" * 32)
    assert struct.unpack_from("ii", req) == (256, 32) and req[8:] == b"\x01" * 32
