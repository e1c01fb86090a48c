"""`sanbox doctor` says how a running computer's memory snapshot is saved here: live by default
where the hypervisor can (a computer resumed from its saved memory aside), stopped where it
cannot or where asked, and stopped, said in yellow, where live is asked but the hypervisor could
lose pages written during a live save. `saves_live` is that choice as a snapshot makes it."""

from __future__ import annotations

import dataclasses

import pytest

from sanbox.cli import doctor
from sanbox.cli._output import console
from sanbox.host.drivers.local import LocalDriver
from sanbox.host.machines.snapshot import saves_live
from sanbox.host.settings import HostSettings

pytestmark = pytest.mark.unit


def said(setting: str, live: bool) -> str:
    caps = dataclasses.replace(LocalDriver().capabilities, live_memory_save=live)
    with console.capture() as out:
        doctor._snapshots(setting, "qemu-tcg", caps)
    return " ".join(out.get().split())


def test_by_default_snapshots_are_live_where_the_hypervisor_can() -> None:
    assert HostSettings.from_env({}).snapshot == "auto"
    assert said("auto", live=True).startswith("snapshots live:")
    assert "resumed from its saved memory: stopped" in said("auto", live=True)
    assert said("auto", live=False).startswith("snapshots stopped:")
    assert "qemu-tcg here could lose pages" in said("auto", live=False)


def test_stopped_is_said_with_whether_live_could() -> None:
    assert said("stopped", live=False).startswith("snapshots stopped:")
    assert "qemu-tcg here cannot" in said("stopped", live=False)
    assert "qemu-tcg here can save" in said("stopped", live=True)


def test_live_is_said_only_where_the_hypervisor_saves_live() -> None:
    assert said("live", live=True) == "snapshots live: a running guest's memory is saved as it runs"
    refused = said("live", live=False)
    assert refused.startswith("snapshots stopped: SANBOX_SNAPSHOT=live, but qemu-tcg")


@pytest.mark.parametrize(
    ("setting", "can", "own", "live"),
    [
        ("auto", True, None, True),
        ("auto", True, 7, False),  # resumed from its own memory: only the pages written since
        ("auto", False, None, False),
        ("live", True, 7, True),
        ("live", False, None, False),  # the hypervisor would lose pages: never live
        ("stopped", True, None, False),
    ],
)
def test_a_snapshot_saves_live_where_the_setting_and_the_hypervisor_let_it(
    setting: str, can: bool, own: int | None, live: bool
) -> None:
    assert saves_live(setting, can, own) is live
