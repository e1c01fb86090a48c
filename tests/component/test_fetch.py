"""Package fetching against the real registries: the host's apt-get, pip and npm download jq, six
and is-number into bundles; the bundles install offline (the .debs unpack to a jq that runs, the
wheels install with the bundled pip under Debian's python3, the npm tarball loads under node);
a second fetch is a cache hit that runs no tool; a package that does not exist is a FetchError
naming it. apt resolves against the dpkg status of the built base image, so only what a guest
lacks is fetched."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sanbox.host.image import ImageError, find_image
from sanbox.templates.fetch import FetchError, fetch_apt, fetch_npm, fetch_pip
from sanbox.templates.fetch_sandbox import FetchSandbox

from ..conftest import vm_data_dir
from ..reachable import reachable_dir

pytestmark = pytest.mark.component


def guest_dpkg_status(dest: Path) -> Path:
    """/var/lib/dpkg/status out of the built base image's ext4 root filesystem."""
    try:
        image = find_image(vm_data_dir(), "base")
    except ImageError as exc:
        pytest.skip(f"apt fetch needs the guest's dpkg status from a built base image: {exc}")
    debugfs = shutil.which("debugfs") or shutil.which("debugfs", path="/usr/sbin:/sbin")
    if debugfs is None:
        pytest.skip("reading the guest's dpkg status needs debugfs (apt-get install e2fsprogs)")
    rootfs = image.path / "rootfs.raw"
    proc = subprocess.run(
        [debugfs, "-R", "cat /var/lib/dpkg/status", str(rootfs)], capture_output=True, check=False
    )
    if proc.returncode != 0 or b"Package: python3\n" not in proc.stdout:
        pytest.skip(f"could not read the dpkg status from {rootfs}: {proc.stderr[-300:]!r}")
    dest.write_bytes(proc.stdout)
    return dest


@pytest.fixture(scope="module")
def cache() -> Iterator[Path]:
    with reachable_dir("sanbox-fetch-cache-") as path:
        yield path


def test_apt_fetches_only_what_the_guest_lacks_and_it_runs_offline(
    cache: Path, tmp_path: Path
) -> None:
    status = guest_dpkg_status(tmp_path / "status")
    bundle = fetch_apt(["jq"], status, cache)
    debs = sorted(f.split("/")[1].split("_")[0] for f in bundle.files if f.startswith("debs/"))
    assert debs == ["jq", "libjq1", "libonig5"]  # libc6 and the rest are in the guest already
    assert (bundle.path / "install.sh").exists() and bundle.install[0] == "/bin/sh"

    root = tmp_path / "root"
    for deb in (bundle.path / "debs").iterdir():
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    env = {**os.environ, "LD_LIBRARY_PATH": str(root / "usr/lib/x86_64-linux-gnu")}
    out = subprocess.run(
        [str(root / "usr/bin/jq"), "-n", "[1,2] | add"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "3"

    def no_tool(*_a: object, **_k: object) -> None:
        raise AssertionError("a tool ran for a cached bundle")

    # same packages, status and archive state (the day's lists): cached, no tool runs
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(FetchSandbox, "open", no_tool)
        again = fetch_apt(["jq"], status, cache)
    assert again == bundle  # same packages and status: cached, apt-get not run


def test_apt_names_a_package_that_does_not_exist(cache: Path, tmp_path: Path) -> None:
    status = guest_dpkg_status(tmp_path / "status")
    with pytest.raises(FetchError, match="no package 'sanbox-no-such-package'") as caught:
        fetch_apt(["jq", "sanbox-no-such-package"], status, cache)
    assert "\n" not in str(caught.value)
    assert not list((cache / "tmp").iterdir())


def test_pip_fetches_wheels_that_install_offline_with_the_bundled_pip(
    cache: Path, tmp_path: Path
) -> None:
    bundle = fetch_pip(["six"], cache)
    wheels = [f for f in bundle.files if f.startswith("wheels/")]
    assert len(wheels) == 1 and wheels[0].startswith("wheels/six-")
    pip_wheel = next(bundle.path.glob("pip/pip-*.whl"))
    python3 = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else "python3"
    target = tmp_path / "site"
    subprocess.run(
        [
            python3,
            f"{pip_wheel}/pip",
            "install",
            "--isolated",
            "--no-index",
            "--find-links",
            str(bundle.path / "wheels"),
            "--target",
            str(target),
            "--disable-pip-version-check",
            "six",
        ],
        check=True,
        capture_output=True,
    )
    out = subprocess.run(
        [python3, "-c", "import six; print(six.__file__)"],
        env={**os.environ, "PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.startswith(str(target))

    assert fetch_pip(["six"], cache, python="/nonexistent/python3") == bundle  # cache hit


def test_pip_names_a_package_that_does_not_exist(cache: Path) -> None:
    with pytest.raises(FetchError, match="no wheel of 'sanbox-no-such-package-zq'"):
        fetch_pip(["sanbox-no-such-package-zq"], cache)


def test_npm_fetches_a_tarball_that_node_loads(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("npm") is None:
        pytest.skip("npm fetch needs npm on the host (apt-get install npm)")
    bundle = fetch_npm(["is-number"], cache)
    with tarfile.open(bundle.path / "npm-prefix.tar.gz") as tar:
        names = tar.getnames()
        assert "lib/node_modules/is-number/package.json" in names
        assert all(m.uid == 0 for m in tar.getmembers())
        tar.extractall(tmp_path / "usr-local", filter="tar")
    modules = tmp_path / "usr-local/lib/node_modules"
    out = subprocess.run(
        ["node", "-e", "console.log(require('is-number')('42'))"],
        env={**os.environ, "NODE_PATH": str(modules)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "true"

    monkeypatch.setenv("npm_config_registry", "http://127.0.0.1:9/")
    assert fetch_npm(["is-number"], cache) == bundle  # cache hit: npm not run


def test_npm_names_a_package_that_does_not_exist(cache: Path) -> None:
    if shutil.which("npm") is None:
        pytest.skip("npm fetch needs npm on the host (apt-get install npm)")
    with pytest.raises(FetchError, match="no npm package 'sanbox-no-such-package-zq"):
        fetch_npm(["sanbox-no-such-package-zq"], cache)
