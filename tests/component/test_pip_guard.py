"""The guard every fetch's pip runs under (`pip_guard`): this host's pip runs through it, and a
pip the guard does not know, or whose requirement construction is not where the guard wraps it,
does not run at all: the fetch is refused (host), the reason in the server's log. Run with the
test's own python and pip, no network."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sanbox.templates import pip_guard
from sanbox.templates.fetch_common import FetchError, ToolResult
from sanbox.templates.fetch_pip import check_guarded
from sanbox.templates.registry_only import check_pip_output

pytestmark = pytest.mark.component


def guarded(args: list[str], before: str = "") -> subprocess.CompletedProcess[str]:
    """pip under the guard, as `fetch_pip` runs it; `before` changes pip first (a pip laid out
    otherwise)."""
    python, isolated, dash_c, source = pip_guard.argv(sys.executable)
    assert (isolated, dash_c) == ("-I", "-c")  # no PYTHONPATH, user site nor working folder
    code = f"{before}\nexec(compile({source!r}, 'pip_guard', 'exec'))" if before else source
    return subprocess.run(
        [python, isolated, dash_c, code, *args], capture_output=True, text=True, timeout=120
    )


def test_this_hosts_pip_runs_under_the_guard() -> None:
    out = guarded(["--version"])
    assert out.returncode == 0 and out.stdout.startswith("pip "), out.stderr


@pytest.mark.parametrize(
    "before",
    [
        "import pip; pip.__version__ = '99.0'",
        "import pip._internal.cli.req_command as r; r.install_req_from_req_string = print",
        "import pip._internal.req.constructors as c, pip._internal.cli.req_command as r\n"
        "def f(line, parent=None): pass\n"
        "c.install_req_from_req_string = r.install_req_from_req_string = f",
    ],
    ids=["unknown-version", "moved", "changed"],
)
def test_a_pip_the_guard_does_not_know_does_not_run(before: str, tmp_path: Path) -> None:
    out = guarded(["download", "--no-deps", "--dest", str(tmp_path), "six"], before)
    assert out.returncode == pip_guard.UNGUARDED_EXIT
    assert out.stderr.startswith(pip_guard.UNGUARDED) and list(tmp_path.iterdir()) == []
    with pytest.raises(FetchError) as caught:
        check_guarded(ToolResult(out.returncode, out.stderr))
    assert caught.value.kind == "host" and "server's log" in str(caught.value)
    assert "99.0" not in str(caught.value)  # the host's pip is the operator's to read


def test_the_guards_refusal_names_the_package_and_its_reference() -> None:
    line = f"ERROR: {pip_guard.REFUSED} 'a' requires 'evil@ file:///tmp/x'"
    with pytest.raises(FetchError) as caught:
        check_pip_output(f"Collecting a\n{line}\n")
    reason = caught.value.reason
    assert reason.startswith("pip package 'a' requires 'evil@ file:///tmp/x' as a direct")
    assert caught.value.kind == "pip"
    check_pip_output("ERROR: No matching distribution found for six\n")  # not the guard's
