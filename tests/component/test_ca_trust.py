"""The script that puts an org's CA in a guest's system store, run by sh on this host against a
store of its own (the paths rewritten under a temporary folder): a new CA is added the way
`update-ca-certificates` adds one, without running it (its loop over every certificate took over
a minute in an emulated guest on a loaded host, and killed the builds that bind secrets); the same
CA again changes nothing; a changed CA takes the full rebuild. Failures always say why."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sanbox.control import secret_book
from sanbox.control.secret_book import trust_failure
from sanbox.host.egress.org_ca import new_ca
from sanbox.templates.trust import CA_FILE, SYSTEM_BUNDLE

pytestmark = pytest.mark.component

OTHER_PEM = b"-----BEGIN CERTIFICATE-----\nMIIBothercertificate\n-----END CERTIFICATE-----\n"


def run_trust(root: Path, pem: bytes) -> subprocess.CompletedProcess[bytes]:
    """The script with its paths under `root`, and an `update-ca-certificates` that only
    says it ran (this host's own store is never touched)."""
    script = secret_book._TRUST
    for var, path in (("f", CA_FILE), ("b", SYSTEM_BUNDLE), ("d", "/etc/ssl/certs")):
        assert f"{var}={path};" in script
        script = script.replace(f"{var}={path};", f"{var}={root}{path};")
    tools = root / "bin"
    tools.mkdir(exist_ok=True)
    fake = tools / "update-ca-certificates"
    fake.write_text(f"#!/bin/sh\necho ran >> {root}/rebuilt\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tools}:{os.environ['PATH']}"}
    return subprocess.run(["sh", "-c", script], input=pem, env=env, capture_output=True)


def test_a_new_ca_is_added_once_without_a_full_rebuild(tmp_path: Path) -> None:
    certs = tmp_path / "etc/ssl/certs"
    certs.mkdir(parents=True)
    bundle = tmp_path / SYSTEM_BUNDLE.lstrip("/")
    bundle.write_bytes(OTHER_PEM)
    pem, _key = new_ca("org_test")
    for _ in range(2):  # the second run finds it there and changes nothing
        r = run_trust(tmp_path, pem)
        assert r.returncode == 0, r.stderr
    assert not (tmp_path / "rebuilt").exists()
    assert (tmp_path / CA_FILE.lstrip("/")).read_bytes() == pem
    assert bundle.read_bytes() == OTHER_PEM + pem  # appended once
    want = (
        subprocess.run(
            ["openssl", "x509", "-hash", "-noout"], input=pem, capture_output=True, check=True
        )
        .stdout.decode()
        .strip()
    )
    link = certs / f"{want}.0"
    assert link.resolve().read_bytes() == pem  # what OpenSSL's directory lookup opens
    assert (certs / "sanbox-egress-ca.pem").resolve() == (tmp_path / CA_FILE.lstrip("/"))


def test_a_changed_ca_takes_the_full_rebuild(tmp_path: Path) -> None:
    (tmp_path / "etc/ssl/certs").mkdir(parents=True)
    (tmp_path / SYSTEM_BUNDLE.lstrip("/")).write_bytes(OTHER_PEM)
    first, _ = new_ca("org_test")
    second, _ = new_ca("org_test")
    assert run_trust(tmp_path, first).returncode == 0
    assert run_trust(tmp_path, second).returncode == 0
    assert (tmp_path / "rebuilt").read_text() == "ran\n"
    assert (tmp_path / CA_FILE.lstrip("/")).read_bytes() == second


def test_a_failure_always_says_why() -> None:
    assert trust_failure(0, False, b"") is None
    timed_out = trust_failure(-1, True, b"")
    assert timed_out and "did not finish" in timed_out
    silent = trust_failure(1, False, b"")
    assert silent and "exited with 1" in silent and "said nothing" in silent
    said = trust_failure(2, False, b"cat: write error: No space left on device\n")
    assert said and said.endswith("No space left on device")
