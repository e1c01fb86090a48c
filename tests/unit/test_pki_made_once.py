"""A CA and the fleet's control identity, made on first use by several processes at once (API
nodes sharing a folder, a CLI command beside the server), end as one matching pair each: every
process then loads a key that matches its certificate."""

from __future__ import annotations

import multiprocessing
import ssl
from pathlib import Path
from typing import Any

import pytest

from sanbox.fleet.link.pki import FleetCAs

pytestmark = pytest.mark.unit

PROCESSES = 8


def _make(folder: Path, start: Any) -> None:
    start.wait()  # all at once
    me = FleetCAs(folder).control_identity()
    ssl.create_default_context().load_cert_chain(str(me.cert), str(me.key))  # a mismatch raises


def test_processes_making_the_control_identity_at_once_end_with_one_matching_pair(
    tmp_path: Path,
) -> None:
    ctx = multiprocessing.get_context("fork")
    for attempt in range(5):
        folder = tmp_path / str(attempt)
        start = ctx.Barrier(PROCESSES)
        procs = [ctx.Process(target=_make, args=(folder, start)) for _ in range(PROCESSES)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [0] * PROCESSES, f"attempt {attempt}"
        me = FleetCAs(folder).control_identity()
        ssl.create_default_context().load_cert_chain(str(me.cert), str(me.key))
        assert not list(folder.glob(".*.tmp")), "a half-written file was left"
