"""The built-in types' userspace random generators in computers copied from one memory image:
opencode's front draws only from the kernel (reseeded in each copy), Chromium is started again
on a new machine-id (BoringSSL keeps its generator in process memory)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
TEMPLATES = Path(__file__).parents[2] / "templates"
USERSPACE_RANDOM = re.compile(
    r"randomBytes|randomUUID|randomInt|randomFill|getRandomValues|generateKey|Math\.random"
)


def test_opencode_front_draws_no_randomness_from_its_own_memory() -> None:
    code = (TEMPLATES / "opencode" / "opencode-front.js").read_text()
    calls = [ln for ln in code.splitlines() if not ln.lstrip().startswith("//")]
    assert not [ln for ln in calls if USERSPACE_RANDOM.search(ln)]
    assert "fs.openSync('/dev/urandom', 'r')" in code


def test_chromium_is_restarted_on_a_new_machine_id() -> None:
    script = (TEMPLATES / "browser" / "browser-service").read_text()
    branch = script[script.index("  chromium)") : script.index("  *)")]
    assert "exec" not in branch.split("run_as_browser chromium")[0].splitlines()[-1]
    assert "id=$(cat /etc/machine-id" in branch and '!= "$id"' in branch
    assert 'kill "$pid"' in branch and "exit 75" in branch  # the supervisor starts it again
