"""A layer's digest reads only the data a file holds, and means its bytes (holes count as zeros)."""

from __future__ import annotations

import os
from pathlib import Path

from sanbox.host.disk.layers import CHUNKED, _digest_whole, digest_file, matches

KEY = bytes(range(32))
MIB = 1 << 20


def _sparse(path: Path, size: int, writes: dict[int, bytes]) -> Path:
    with path.open("wb") as f:
        f.truncate(size)
        for offset, data in writes.items():
            f.seek(offset)
            f.write(data)
    return path


def test_a_sparse_file_and_a_full_copy_have_one_digest(tmp_path: Path) -> None:
    writes = {3: os.urandom(5000), 7 * MIB - 2: b"across a chunk", 20 * MIB - 1: b"!"}
    sparse = _sparse(tmp_path / "sparse", 20 * MIB, writes)
    full = tmp_path / "full"
    full.write_bytes(sparse.read_bytes())  # every byte written, zeros too
    assert os.stat(sparse).st_blocks < os.stat(full).st_blocks
    assert digest_file(sparse, KEY) == digest_file(full, KEY)
    assert digest_file(sparse, KEY).startswith(CHUNKED)


def test_any_changed_byte_size_or_key_changes_the_digest(tmp_path: Path) -> None:
    base = _sparse(tmp_path / "a", 9 * MIB, {MIB: b"data"})
    digest = digest_file(base, KEY)
    for offset in (0, MIB + 2, 5 * MIB, 9 * MIB - 1):  # in a hole, in data, at the end
        other = _sparse(tmp_path / f"b{offset}", 9 * MIB, {MIB: b"data", offset: b"\1"})
        assert digest_file(other, KEY) != digest, offset
    assert digest_file(_sparse(tmp_path / "c", 9 * MIB + 1, {MIB: b"data"}), KEY) != digest
    moved = _sparse(tmp_path / "d", 9 * MIB, {2 * MIB: b"data"})  # the same chunk bytes, elsewhere
    assert digest_file(moved, KEY) != digest
    assert digest_file(base, bytes(32)) != digest
    assert matches(base, digest, KEY)


def test_a_layer_frozen_with_the_whole_file_digest_still_verifies(tmp_path: Path) -> None:
    layer = _sparse(tmp_path / "old", 4 * MIB, {10: b"before chunks"})
    old = _digest_whole(layer, KEY)
    assert not old.startswith(CHUNKED)
    assert matches(layer, old, KEY)
    layer.write_bytes(b"changed")
    assert not matches(layer, old, KEY)


def test_an_empty_file_has_a_digest(tmp_path: Path) -> None:
    empty = tmp_path / "e"
    empty.touch()
    assert matches(empty, digest_file(empty, KEY), KEY)
