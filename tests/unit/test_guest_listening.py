"""The guest agent's `listening`: a port counts only when the kernel's table lists a listener a
dial of 127.0.0.1 reaches (0.0.0.0 or 127.0.0.1) with nothing waiting in its accept queue; every
other row (another state, another address, another port, a queue not drained) and a table that
cannot be read is "not seen", which the readiness check then dials to know."""

from __future__ import annotations

from pathlib import Path

import pytest

from sanbox.guest.tcp import listening

pytestmark = pytest.mark.unit

HEADER = (
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
    "timeout inode\n"
)


def row(local: str, state: str, queues: str = "00000000:00000000") -> str:
    return (
        f"   0: {local} 00000000:0000 {state} {queues} 00:00000000 00000000     0        0 "
        "313 1 0000000046030932 100 0 0 10 0\n"
    )


def table(tmp_path: Path, *rows: str) -> str:
    path = tmp_path / "tcp"
    path.write_text(HEADER + "".join(rows))
    return str(path)


@pytest.mark.parametrize("address", ["00000000", "0100007F"])  # 0.0.0.0, 127.0.0.1
def test_a_listener_a_loopback_dial_reaches_is_seen(tmp_path: Path, address: str) -> None:
    assert listening(8080, table(tmp_path, row(f"{address}:1F90", "0A")))


@pytest.mark.parametrize(
    "line",
    [
        row("0100007F:1F91", "0A"),  # another port
        row("0200007F:1F90", "0A"),  # 127.0.0.2: a dial of 127.0.0.1 does not reach it
        row("0A00000A:1F90", "0A"),  # 10.0.0.10
        row("0100007F:1F90", "01"),  # an established connection from that port, not a listener
        row("0100007F:1F90", "0A", "00000000:00000003"),  # three connections not accepted yet
    ],
)
def test_anything_else_is_not_seen(tmp_path: Path, line: str) -> None:
    assert not listening(8080, table(tmp_path, line))


def test_one_row_that_counts_among_others_is_enough(tmp_path: Path) -> None:
    rows = (row("0200007F:1F90", "0A"), row("0100007F:0016", "0A"), row("00000000:1F90", "0A"))
    assert listening(8080, table(tmp_path, *rows))


def test_no_table_is_not_seen(tmp_path: Path) -> None:
    assert not listening(8080, str(tmp_path / "absent"))
    assert not listening(8080, table(tmp_path, "garbage\n", "  1: short\n"))
