"""The reflink probe is safe to run from several threads of one process at once (the first
creates of a fresh server run it together)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from sanbox.host.disk.clone import can_reflink

pytestmark = pytest.mark.unit


def test_threads_probing_at_once_do_not_trip_over_each_other(tmp_path: Path) -> None:
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []
    answers: list[bool] = []

    def probe() -> None:
        barrier.wait()
        try:
            answers.append(can_reflink(tmp_path))
        except BaseException as exc:  # noqa: BLE001  (what the test reports)
            errors.append(exc)

    threads = [threading.Thread(target=probe) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(answers)) == 1
    assert not list(tmp_path.iterdir())  # no probe file left behind
