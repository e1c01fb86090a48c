"""The host fetches registry packages only, whatever their publishers wrote as dependencies: a
package on the (loopback) registry whose dependency is `file:` a host tarball, a host directory
or a git repository on the host is refused before npm fetches a package, naming both; a wheel
whose Requires-Dist is `name @ file:///host/...` is refused before pip downloads one; nothing of
the host file reaches a bundle; a source tree or sdist such a reference names is refused before
pip fetches or builds it (its build backend never runs). What is on the registry installs in
npm's global layout.

The real npm and pip run unconfined (no network namespace here): only the loopback registry
answers them."""

from __future__ import annotations

import contextlib
import ensurepip
import io
import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sanbox.templates import fetch_npm as npm_module
from sanbox.templates.fetch import FetchError, fetch_npm, fetch_pip
from sanbox.templates.fetch_sandbox import FetchSandbox

from ..package_registry import PackageRegistry, npm_tarball, wheel

pytestmark = pytest.mark.component

SECRET = b"host-secret-7f3a"


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[PackageRegistry]:
    """The loopback registry as the fetchers' only one, and the tools run unconfined."""

    @contextlib.contextmanager
    def unconfined(*_a: object, **_k: object) -> Iterator[FetchSandbox]:
        yield FetchSandbox(None, None, os.getuid(), os.getgid())

    monkeypatch.setattr(FetchSandbox, "open", unconfined)
    with PackageRegistry() as reg:
        monkeypatch.setenv("npm_config_registry", reg.npm_url)
        monkeypatch.setenv("npm_config_globalconfig", str(tmp_path / "no-global-npmrc"))
        monkeypatch.setenv("PIP_INDEX_URL", reg.pip_url)
        monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
        monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
        monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
        yield reg


def needs_npm() -> None:
    if shutil.which("npm") is None:
        pytest.skip("npm fetch needs npm on the host (apt-get install npm)")


def bundle_bytes(root: Path) -> bytes:
    """Every byte under root, the npm archive's members unpacked too."""
    out = b""
    for path in sorted(root.rglob("*")):
        if path.is_file():
            out += path.read_bytes()
            if path.name.endswith(".tar.gz"):
                with tarfile.open(path) as tar:
                    for member in tar.getmembers():
                        f = tar.extractfile(member) if member.isfile() else None
                        out += f.read() if f is not None else b""
    return out


def make_repo(path: Path) -> None:
    """A git repository on the host holding an npm package (and the secret)."""
    if shutil.which("git") is None:
        pytest.skip("a git dependency's test needs git on the host")
    path.mkdir()
    (path / "package.json").write_text('{"name": "x", "version": "9.9.9"}')
    (path / "secret.txt").write_bytes(SECRET)
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)


@pytest.mark.parametrize("kind", ["file-tarball", "file-dir", "git-file"])
def test_an_npm_dependency_off_the_registry_is_refused_naming_it(
    registry: PackageRegistry, tmp_path: Path, kind: str
) -> None:
    needs_npm()
    host = tmp_path / "host"
    host.mkdir()
    (host / "secret.tgz").write_bytes(npm_tarball("x", "9.9.9", {}, {}))
    (host / "dir").mkdir()
    (host / "dir/package.json").write_text('{"name": "x", "version": "9.9.9"}')
    (host / "dir/secret.txt").write_bytes(SECRET)
    if kind == "git-file":
        make_repo(host / "repo")
    spec = {
        "file-tarball": f"file:{host}/secret.tgz",
        "file-dir": f"file:{host}/dir",
        "git-file": f"git+file://{host}/repo",
    }[kind]
    registry.npm("innocent", "1.0.0")
    registry.npm("evil", "1.0.0", {"innocent": "^1", "x": spec})
    cache = tmp_path / "cache"
    with pytest.raises(FetchError) as caught:
        fetch_npm(["evil"], cache)
    reason = str(caught.value)
    if kind == "git-file":
        assert "git repository" in reason
    else:
        assert "'evil' depends on 'x'" in reason and spec in reason
    assert "registry" in reason and "\n" not in reason
    tarballs = [r for r in registry.requests if r.endswith(".tgz")]
    assert tarballs == []  # refused before a package was fetched
    assert not (cache / "bundles").exists() or not any((cache / "bundles").iterdir())


def test_npm_installs_registry_packages_in_the_global_layout(
    registry: PackageRegistry, tmp_path: Path
) -> None:
    needs_npm()
    registry.npm("dep", "1.2.0")
    registry.npm("tool", "2.0.0", {"dep": "^1"}, bin_={"tool": "cli.js"})
    bundle = fetch_npm(["tool"], tmp_path / "cache")
    with tarfile.open(bundle.path / npm_module.ARCHIVE) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert "lib/node_modules/tool/package.json" in members
    assert "lib/node_modules/tool/node_modules/dep/package.json" in members
    assert "lib/node_modules/dep/package.json" not in members  # under its dependent, as -g does
    link = members["bin/tool"]
    assert link.issym() and link.linkname == "../lib/node_modules/tool/cli.js"
    assert members["lib/node_modules/tool/cli.js"].mode & 0o111  # npm made it executable
    assert not [n for n in members if ".package-lock" in n or "/.bin" in n]
    assert all(m.uid == 0 for m in members.values())


def test_a_package_with_other_platforms_optional_packages_installs(
    registry: PackageRegistry, tmp_path: Path
) -> None:
    # As opencode-ai does: an optional package per platform, some of which the registry this
    # host reaches does not serve. npm 11's `--package-lock-only` leaves those out of the
    # lockfile, which `npm ci` then refused as out of sync (every opencode build failed here);
    # the lockfile is installed as it is and found unchanged.
    needs_npm()
    registry.npm("tool-linux", "1.0.0", os_=["linux"])
    registry.npm("tool", "1.0.0", optional={"tool-linux": "1.0.0", "tool-darwin": "1.0.0"})
    bundle = fetch_npm(["tool"], tmp_path / "cache")
    with tarfile.open(bundle.path / npm_module.ARCHIVE) as tar:
        names = set(tar.getnames())
    assert "lib/node_modules/tool/package.json" in names
    assert any(n.endswith("tool-linux/package.json") for n in names), sorted(names)
    assert not any("tool-darwin" in n for n in names)


def test_an_install_that_resolved_anew_is_refused(tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    (project / "package-lock.json").write_bytes(b'{"packages": {}}')
    checked = npm_module._read_lock(project)
    npm_module._unchanged(project, checked)
    (project / "package-lock.json").write_bytes(b'{"packages": {"node_modules/x": {}}}')
    with pytest.raises(FetchError, match="anew"):
        npm_module._unchanged(project, checked)


def test_a_wheel_requiring_a_host_file_is_refused_naming_it(
    registry: PackageRegistry, tmp_path: Path
) -> None:
    secret = tmp_path / "secret-1.0-py3-none-any.whl"
    secret.write_bytes(wheel("secret", "1.0", []) + SECRET)
    registry.wheel("innocent", "1.0")
    registry.wheel("evil", "1.0", ["innocent", f"secret @ {secret.as_uri()}"])
    bundled = Path(ensurepip.__file__).parent / "_bundled"
    pip_wheel = next(bundled.glob("pip-*.whl"))
    registry.add_wheel(pip_wheel.name, pip_wheel.read_bytes())
    cache = tmp_path / "cache"
    with pytest.raises(FetchError) as caught:
        fetch_pip(["evil"], cache)
    reason = str(caught.value)
    assert "'evil' requires 'secret@ " in reason and secret.as_uri() in reason
    assert "direct reference" in reason and "\n" not in reason
    assert not (cache / "bundles").exists() or not any((cache / "bundles").iterdir())

    bundle = fetch_pip(["innocent"], cache)  # a registry package still fetches
    assert [f for f in bundle.files if f.startswith("wheels/")] == [
        "wheels/innocent-1.0-py3-none-any.whl"
    ]
    assert SECRET not in bundle_bytes(bundle.path)


def evil_tree(marker: Path) -> dict[str, bytes]:
    """A source tree whose build writes `marker` as soon as pip loads its backend: in-tree
    (`backend-path`), needing nothing from the index (`requires = []`); its setup.py too."""
    write = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('built')\n"
    return {
        "pyproject.toml": b'[build-system]\nrequires = []\nbuild-backend = "backend"\n'
        b'backend-path = ["."]\n',
        "backend.py": write.encode(),
        "setup.py": (write + "from setuptools import setup\nsetup(name='evil')\n").encode(),
    }


def sdist(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path, data in {"PKG-INFO": b"Metadata-Version: 2.1\nName: evil\n", **files}.items():
            info = tarfile.TarInfo(f"evil-1.0/{path}")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.parametrize("kind", ["file-dir", "http-sdist"])
def test_a_wheel_requiring_a_source_is_refused_before_pip_builds_it(
    registry: PackageRegistry, tmp_path: Path, kind: str
) -> None:
    marker = tmp_path / "built"
    tree = tmp_path / "evilpkg"
    tree.mkdir()
    for name, data in evil_tree(marker).items():
        (tree / name).write_bytes(data)
    registry.blobs["/files/evil-1.0.tar.gz"] = sdist(evil_tree(marker))
    url = tree.as_uri() if kind == "file-dir" else f"{registry.base}/files/evil-1.0.tar.gz"
    registry.wheel("innocent", "1.0")
    registry.wheel("a", "1.0", ["innocent", f"evil @ {url}"])
    cache = tmp_path / "cache"
    with pytest.raises(FetchError) as caught:
        fetch_pip(["a"], cache)
    assert not marker.exists()  # its build backend never ran on the host
    assert "/files/evil-1.0.tar.gz" not in registry.requests  # nor was it fetched
    reason = str(caught.value)
    assert f"'a' requires 'evil@ {url}'" in reason and "direct reference" in reason
    assert "registry" in reason and "\n" not in reason
    assert not (cache / "bundles").exists() or not any((cache / "bundles").iterdir())
