"""`sanbox doctor` says how a running computer's memory snapshot is saved here: stopped by
default, live where asked and the hypervisor can, and stopped, said in yellow, where asked but
the hypervisor could lose pages written during a live save."""

from __future__ import annotations

import dataclasses

import pytest

from sanbox.cli import doctor
from sanbox.host.drivers.local import LocalDriver

pytestmark = pytest.mark.unit


def said(setting: str, live: bool) -> str:
    caps = dataclasses.replace(LocalDriver().capabilities, live_memory_save=live)
    with doctor.console.capture() as out:
        doctor._snapshots(setting, "qemu-tcg", caps)
    return " ".join(out.get().split())


def test_by_default_snapshots_stop_the_guest_and_doctor_says_whether_live_could() -> None:
    assert said("stopped", live=False).startswith("snapshots stopped:")
    assert "qemu-tcg here cannot" in said("stopped", live=False)
    assert "qemu-tcg here can)" in said("stopped", live=True)


def test_live_is_said_only_where_the_hypervisor_saves_live() -> None:
    assert said("live", live=True).startswith("snapshots live:")
    refused = said("live", live=False)
    assert refused.startswith("snapshots stopped: SANBOX_SNAPSHOT=live, but qemu-tcg")
