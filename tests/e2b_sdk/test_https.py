"""E2B's SDK over HTTPS on a wildcard name, configured by E2B_DOMAIN alone, as in production: the
server's own CA (`--tls-self-signed`), `*.e2b.test` resolving to loopback, all inside namespaces
the test makes (`https_stand.py`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2b, pytest.mark.integration]


def test_the_sdk_over_https_on_a_wildcard_name() -> None:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare (util-linux)")
    got = subprocess.run(
        [
            "unshare",
            "--net",
            "--mount",
            sys.executable,
            str(Path(__file__).with_name("https_stand.py")),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert got.returncode == 0 and got.stdout.strip().endswith("ok"), got.stderr[-4000:]
