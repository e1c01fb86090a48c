"""The Firecracker probe's reasons. The binary checks run fake programs on a PATH of the test's
own (a script that prints a version: a test of the probe's logic, not a claim that Firecracker
runs); the KVM checks open real device nodes and files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sanbox.host.drivers.firecracker.probe import firecracker_available, kvm_usable

pytestmark = pytest.mark.unit


def program(directory: Path, name: str, script: str) -> None:
    path = directory / name
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)


def kvm_here() -> str:
    """'' if this machine's /dev/kvm can make a VM (the probe's own check), else why not."""
    return kvm_usable("/dev/kvm")


def test_this_host_has_no_firecracker() -> None:
    if shutil.which("firecracker") is not None:
        pytest.skip("this host has a firecracker binary")
    assert firecracker_available() == (False, "no firecracker binary on PATH")


def test_no_binary(tmp_path: Path) -> None:
    assert firecracker_available(str(tmp_path)) == (False, "no firecracker binary on PATH")


def test_a_binary_that_reports_no_version(tmp_path: Path) -> None:
    program(tmp_path, "firecracker", "echo 'usage: nothing'")
    ok, reason = firecracker_available(str(tmp_path))
    assert not ok and "reports no version (usage: nothing)" in reason
    program(tmp_path, "firecracker", "echo 'Firecracker v1.16.1'; exit 3")
    ok, reason = firecracker_available(str(tmp_path))
    assert not ok and "reports no version" in reason


def test_the_jailer_is_needed_for_confinement_and_must_match(tmp_path: Path) -> None:
    program(tmp_path, "firecracker", "echo 'Firecracker v1.16.1'")
    ok, reason = firecracker_available(str(tmp_path), kvm_device=str(tmp_path / "kvm"))
    assert (ok, reason) == (
        False,
        "no jailer binary on PATH (confinement needs Firecracker's jailer)",
    )
    program(tmp_path, "jailer", "echo 'Jailer v1.15.0'")
    ok, reason = firecracker_available(str(tmp_path))
    assert (ok, reason) == (False, "jailer v1.15.0 does not match firecracker v1.16.1")
    ok, reason = firecracker_available(
        str(tmp_path), kvm_device=str(tmp_path / "kvm"), jailer=False
    )
    assert not ok and reason.startswith("KVM not usable")  # past the binaries: KVM is next


def test_kvm_reasons(tmp_path: Path) -> None:
    program(tmp_path, "firecracker", "echo 'Firecracker v1.16.1'")
    program(tmp_path, "jailer", "echo 'Jailer v1.16.1'")
    absent = tmp_path / "no-kvm"
    assert firecracker_available(str(tmp_path), kvm_device=str(absent)) == (
        False,
        f"KVM not usable: {absent}: No such file or directory",
    )
    not_kvm = tmp_path / "plain-file"
    not_kvm.write_bytes(b"")
    ok, reason = firecracker_available(str(tmp_path), kvm_device=str(not_kvm))
    assert not ok and reason.startswith(f"KVM not usable: {not_kvm}: KVM_GET_API_VERSION failed")
    ok, reason = firecracker_available(str(tmp_path), kvm_device="/dev/null")
    assert not ok and "KVM_GET_API_VERSION failed" in reason


def test_with_a_usable_kvm_the_fakes_pass(tmp_path: Path) -> None:
    why = kvm_here()
    if why:
        pytest.skip(why)
    program(tmp_path, "firecracker", "echo 'Firecracker v1.16.1'")
    program(tmp_path, "jailer", "echo 'Jailer v1.16.1'")
    assert firecracker_available(str(tmp_path)) == (
        True,
        "firecracker v1.16.1, jailer v1.16.1, KVM usable",
    )
