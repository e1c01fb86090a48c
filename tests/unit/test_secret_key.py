"""The host's secret key is made once, even when many threads of one process ask for it first."""

from __future__ import annotations

import concurrent.futures
import threading
from pathlib import Path

import pytest

from sanbox.host.keys.secret import KEY_BYTES, SecretKeyError, derived_key

pytestmark = pytest.mark.unit


def test_concurrent_first_uses_agree_on_one_key(tmp_path: Path) -> None:
    path = tmp_path / "host" / "secret.key"
    start = threading.Barrier(16)

    def first_use(_: int) -> bytes:
        start.wait()
        return derived_key(path, "memory-mac")

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        keys = list(pool.map(first_use, range(16)))
    assert len(set(keys)) == 1
    assert path.stat().st_mode & 0o777 == 0o600
    assert len(path.read_bytes()) == KEY_BYTES
    assert sorted(p.name for p in path.parent.iterdir()) == ["secret.key"]


def test_purposes_get_different_keys(tmp_path: Path) -> None:
    path = tmp_path / "secret.key"
    assert derived_key(path, "memory-mac") != derived_key(path, "port-cookie")


def test_a_truncated_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "secret.key"
    path.write_bytes(b"short")
    with pytest.raises(SecretKeyError, match="restore it from a backup"):
        derived_key(path, "memory-mac")
