"""`sanbox doctor` says what memory admission counts for each VM's hypervisor beside its RAM."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sanbox.cli.main import app

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("setting", "said"), [("", "the driver's estimate"), ("99", "99 MiB")])
def test_doctor_says_the_hypervisor_memory_admission_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: str, said: str
) -> None:
    monkeypatch.setenv("SANBOX_VM_OVERHEAD_MIB", setting)
    monkeypatch.setenv("COLUMNS", "400")  # its lines unwrapped
    monkeypatch.setenv("SANBOX_RAM_DIR", str(tmp_path / "ram"))
    result = CliRunner().invoke(app, ["doctor", "--no-probe", "--data-dir", str(tmp_path / "d")])
    text = " ".join(result.output.split())  # as the console wrapped it
    said_of_memory = text[text.index("memory each VM counted its RAM and") :]
    assert said in said_of_memory.split(" against ")[0]
    assert said_of_memory.split(" against ")[1].startswith(str(tmp_path / "ram"))
