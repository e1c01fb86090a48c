"""Fetched packages install in a real guest with no way out: the host fetches jq (against the
guest's own dpkg status, read through the agent), six and is-number; the bundles are pushed
through the agent and their install commands run in the guest, offline. jq then runs, six
imports from /usr/local under Debian's python3, and the npm install refuses plainly because the
base image has no node."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sanbox.host.runtime import Machine
from sanbox.templates.fetch import Bundle, fetch_apt, fetch_npm, fetch_pip

from ..reachable import reachable_dir
from .conftest import MakeMachine

pytestmark = pytest.mark.vm
Run = Callable[..., Any]


@pytest.fixture(scope="module")
def guest(make_machine: MakeMachine) -> Machine:
    return make_machine(memory_mib=512)


@pytest.fixture(scope="module")
def cache() -> Iterator[Path]:
    with reachable_dir("sanbox-fetch-cache-") as path:
        yield path


def push(run: Run, machine: Machine, bundle: Bundle) -> None:
    for name in bundle.files:
        data = (bundle.path / name).read_bytes()
        run(machine.agent.files.put(f"{bundle.guest_dir}/{name}", data, mode=0o755))


def sh(run: Run, machine: Machine, cmd: str | list[str]) -> tuple[int, str, str]:
    result = run(
        machine.agent.exec(cmd if isinstance(cmd, list) else ["sh", "-c", cmd], timeout=300)
    )
    return result.exit_code, result.stdout.decode(), result.stderr.decode()


def test_apt_and_pip_bundles_install_offline_in_the_guest(
    run: Run, guest: Machine, cache: Path, tmp_path: Path
) -> None:
    code, _, _ = sh(run, guest, "command -v jq || python3 -c 'import six'")
    assert code != 0, "the base image has neither jq nor six: nothing to prove otherwise"
    code, _, _ = sh(run, guest, "curl -sS -m 5 -o /dev/null http://deb.debian.org/")
    assert code != 0, "the guest must not reach the mirror itself"

    status = tmp_path / "status"
    status.write_bytes(run(guest.agent.files.read("/var/lib/dpkg/status")))
    apt = fetch_apt(["jq"], status, cache)
    push(run, guest, apt)
    code, out, err = sh(run, guest, list(apt.install))
    assert code == 0, (out, err)
    assert sh(run, guest, "jq -n '[1,2] | add'")[1].strip() == "3"
    assert "jq-1.6" in sh(run, guest, "jq --version")[1]

    pip = fetch_pip(["six"], cache)
    push(run, guest, pip)
    code, out, err = sh(run, guest, list(pip.install))
    assert code == 0, (out, err)
    code, out, err = sh(run, guest, "python3 -c 'import six; print(six.__file__)'")
    assert code == 0 and out.startswith("/usr/local/lib/python3.11/dist-packages/six"), err
    code, out, _ = sh(run, guest, "dpkg -S /usr/local/lib/python3.11/dist-packages/six.py")
    assert code != 0  # pip's files are not dpkg's: nothing of Debian's was overwritten


def test_npm_bundle_refuses_plainly_when_the_guest_has_no_node(
    run: Run, guest: Machine, cache: Path
) -> None:
    npm = fetch_npm(["is-number"], cache)
    push(run, guest, npm)
    code, _, err = sh(run, guest, list(npm.install))
    assert code == 127 and "add an apt step with nodejs" in err
    assert sh(run, guest, "test -e /usr/local/lib/node_modules/is-number")[0] != 0
