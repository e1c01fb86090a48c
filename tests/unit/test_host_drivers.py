"""The driver rules of the host layer: every QEMU fact lives in `host/drivers/qemu/`. Elsewhere
QEMU may be named in comments and docstrings only; `select.py` picks a driver by name, and
`qemu-img` (the qcow2 format's own tool) is named in `host/disk/`. The drivers' folder has no
import circle, not even one only type checking sees, imports nothing above it, and every driver
states the same contract."""

from __future__ import annotations

import ast
import tokenize
from pathlib import Path

import pytest

from sanbox.host.drivers import Capabilities, Driver
from sanbox.host.drivers.firecracker import FirecrackerHypervisor
from sanbox.host.drivers.local import LocalDriver
from sanbox.host.drivers.qemu import QemuHypervisor

from .test_import_cycles import SRC, cycles, graph

pytestmark = pytest.mark.unit

PACKAGE = SRC / "sanbox"
QEMU_FOLDER = PACKAGE / "host" / "drivers" / "qemu"
REGISTRY = PACKAGE / "host" / "drivers" / "select.py"  # the one place that names the drivers
DISK_TOOLS = {"qemu-img", "qemu-utils"}  # the qcow2 format's tool and its Debian package


def docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are docstrings."""
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.add(id(value))
    return found


def qemu_in_code(path: Path) -> list[str]:
    """Where `path` names QEMU in code (names, strings that are not docstrings)."""
    tree = ast.parse(path.read_text())
    docs = docstrings(tree)
    found = []
    in_disk = "disk" in path.relative_to(PACKAGE).parts
    for node in ast.walk(tree):
        words: list[str] = []
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            words = [node.value]
        elif isinstance(node, ast.Name):
            words = [node.id]
        elif isinstance(node, ast.Attribute):
            words = [node.attr]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            words = [node.name]
        elif isinstance(node, ast.alias):
            words = [node.name, node.asname or ""]
        elif isinstance(node, ast.ImportFrom):
            words = [node.module or ""]
        for word in words:
            if "qemu" not in word.lower():
                continue
            if in_disk and any(tool in word for tool in DISK_TOOLS):
                continue
            found.append(f"{path.relative_to(PACKAGE)}:{getattr(node, 'lineno', '?')}: {word!r}")
    return found


def test_qemu_is_named_in_code_only_inside_its_driver() -> None:
    outside = [p for p in PACKAGE.rglob("*.py") if QEMU_FOLDER not in p.parents and p != REGISTRY]
    assert len(outside) > 100
    found = [hit for path in outside for hit in qemu_in_code(path)]
    assert found == []


def test_the_finder_sees_qemu_in_code_but_not_in_comments(tmp_path: Path) -> None:
    module = PACKAGE / "host" / "example_for_test.py"
    text = '"""QEMU in a docstring."""\n# QEMU in a comment\nx = "qemu-system"\n'
    try:
        module.write_text(text)
        assert [h.split(": ", 1)[1] for h in qemu_in_code(module)] == ["'qemu-system'"]
    finally:
        module.unlink()
    with tokenize.open(PACKAGE / "host" / "runtime.py") as f:
        assert f.read()  # the sources are read as Python reads them


def graph_with_type_checking() -> dict[str, set[str]]:
    return graph(type_checking=True)


def test_the_drivers_have_no_import_circle_not_even_for_type_checking() -> None:
    edges = graph_with_type_checking()
    drivers = {
        n: {t for t in e if t.startswith("sanbox.host.drivers")}
        for n, e in edges.items()
        if n.startswith("sanbox.host.drivers")
    }
    assert "sanbox.host.drivers.qemu.launch" in drivers
    assert cycles(drivers) == []


def test_the_drivers_import_nothing_above_them() -> None:
    """Drivers know the disk and the guest's protocol below them, never the runtime or control."""
    edges = graph_with_type_checking()
    for name, targets in edges.items():
        if name.startswith("sanbox.host.drivers"):
            above = {
                t
                for t in targets
                if not t.startswith(
                    (
                        "sanbox.host.drivers",
                        "sanbox.host.disk",
                        "sanbox.host.errors",
                        "sanbox.host.linux",
                        "sanbox.guest",
                    )
                )
            }
            assert not above, f"{name} imports {above}"


DRIVERS = [QemuHypervisor("tcg"), LocalDriver(), FirecrackerHypervisor(Path("/nonexistent/fc"))]


@pytest.mark.parametrize("driver", DRIVERS, ids=["qemu", "local", "firecracker"])
def test_every_driver_states_the_contract(driver: Driver) -> None:
    caps = driver.capabilities
    assert isinstance(caps, Capabilities)
    assert caps.disk_formats and set(caps.disk_formats) <= {"qcow2", "raw"}
    assert driver.isolation and driver.build and driver.tools
    assert not driver.is_vm_process("python3 -m pytest")


@pytest.mark.parametrize(
    ("accel", "banner", "live"),
    [
        ("tcg", "QEMU emulator version 7.2.19 (Debian 1:7.2+dfsg-7+deb12u18)", False),
        ("tcg", "QEMU emulator version 8.2.2", False),
        ("tcg", "QEMU emulator version 9.0.0", True),
        ("tcg", "QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2)", True),
        ("kvm", "QEMU emulator version 7.2.19", True),
    ],
)
def test_qemu_saves_memory_live_only_where_no_written_page_is_lost(
    monkeypatch: pytest.MonkeyPatch, accel: str, banner: str, live: bool
) -> None:
    """Before 9.0, TCG could leave a page a vCPU wrote clean during a pre-copy save (a stale
    page in the snapshot): there a memory snapshot stops the vCPUs instead."""
    from sanbox.host.drivers.qemu import launch

    monkeypatch.setattr(launch, "qemu_version", lambda: banner)
    assert QemuHypervisor(accel).capabilities.live_memory_save is live
