"""What the host takes of a guest's word about its kept processes (host/agent/kept.py): each
entry checked, text cut, the listing bounded."""

from __future__ import annotations

import pytest

from sanbox.host.agent.kept import TEXT, KeptInfo, _info

pytestmark = pytest.mark.unit


def test_good_entries_are_read_and_bad_ones_dropped() -> None:
    entry = {"pid": 7, "kind": "exec", "cmd": "x" * 5000, "tag": "t", "running": False}
    entry.update(attached=True, exit_code=3, signal=None)
    assert _info(entry) == KeptInfo(7, "exec", "x" * TEXT, "t", False, True, 3, None)
    bad: object
    for bad in (
        [],
        {"pid": "7", "kind": "exec", "cmd": "x"},
        {"pid": True, "kind": "exec", "cmd": "x"},
        {"pid": 7, "kind": "shell", "cmd": "x"},
        {"pid": 7, "kind": "pty", "cmd": ["x"]},
    ):
        assert _info(bad) is None
    odd = _info(
        {"pid": 8, "kind": "pty", "cmd": "sh", "tag": 5, "running": "yes", "exit_code": 1.5}
    )
    assert odd == KeptInfo(8, "pty", "sh", None, False, False, None, None)
