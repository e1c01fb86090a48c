import json
from pathlib import Path

import pytest

from sanbox.host.data.layout import DataDir
from sanbox.host.errors import MissingToolError
from sanbox.host.image import (
    BuildProgress,
    BuildStepError,
    ImageBuilder,
    archive,
    find_image,
    kernel,
    recipe_for,
)
from sanbox.host.image import builder as builder_module
from sanbox.host.image.errors import ImageNotFoundError

pytestmark = pytest.mark.component

STAMP = {"http://mirror.test/debian/dists/bookworm": "ab" * 32}


@pytest.fixture(autouse=True)
def offline_archive(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test here reads the network: the archive's state is unknown unless a test says."""

    def unreachable(_sources: object) -> dict[str, str]:
        raise archive.ArchiveError("mirror.test is not reachable")

    monkeypatch.setattr(archive, "fetch_stamp", unreachable)


def test_cached_build_is_a_noop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dd = DataDir(tmp_path)
    build_id = recipe_for("base").build_id()
    target = dd.images / "base" / build_id
    target.mkdir(parents=True)
    manifest = {"template": "base", "build_id": build_id, "kernel_release": "k", "disk_size_gib": 8}
    (target / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setenv("PATH", "/nonexistent")  # no tool may be needed
    events: list[BuildProgress] = []
    image = ImageBuilder(dd).build("base", events.append)
    assert image.path == target and events[-1].cached
    assert find_image(dd, "base").build_id == build_id


def test_missing_tool_is_named_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr("shutil.which", lambda *_a, **_k: None)
    with pytest.raises(MissingToolError, match=r"apt-get install"):
        ImageBuilder(DataDir(tmp_path)).build("base")
    assert not (tmp_path / "images").exists()


def test_failed_step_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(builder_module, "require_tool", lambda _t: "/bin/true")

    def no_mirror(*_a: object, **_k: object) -> None:
        raise BuildStepError("kernel", "apt-get download failed", "check the network")

    monkeypatch.setattr(kernel, "fetch", no_mirror)
    dd = DataDir(tmp_path)
    with pytest.raises(BuildStepError, match="step 'kernel'.*check the network"):
        ImageBuilder(dd).build("base")
    assert list(dd.tmp.iterdir()) == []
    assert not (dd.images / "base").exists()
    with pytest.raises(ImageNotFoundError, match="sanbox image build base"):
        find_image(dd, "base")


def test_a_moved_archive_is_a_new_build_and_the_current_build_follows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The archive's state is part of the build's hash: once `image build` has read a stamp, a
    build made before it (or from another state of the archive) is no longer current."""
    dd = DataDir(tmp_path)
    old = recipe_for("base").build_id()
    target = dd.images / "base" / old
    target.mkdir(parents=True)
    manifest = {"template": "base", "build_id": old, "kernel_release": "k", "disk_size_gib": 8}
    (target / "manifest.json").write_text(json.dumps(manifest))
    builder = ImageBuilder(dd)
    assert builder.build("base").build_id == old  # unknown archive: the build there is current
    assert builder.notes and "could not check the Debian archive" in builder.notes[0]

    monkeypatch.setattr(archive, "fetch_stamp", lambda _s: dict(STAMP))
    monkeypatch.setattr(builder_module, "require_tool", lambda _t: "/bin/true")

    def offline(*_a: object, **_k: object) -> None:
        raise BuildStepError("kernel", "apt-get download failed", "check the network")

    monkeypatch.setattr(kernel, "fetch", offline)
    with pytest.raises(BuildStepError):  # a new build is needed: it starts, and fails here
        builder.build("base")
    assert find_image(dd, "base").build_id == old  # the stamp is kept only once a build exists
    new = recipe_for("base").build_id(archive.digest(STAMP))
    assert new != old
    (dd.images / "base" / new).mkdir()
    (dd.images / "base" / new / "manifest.json").write_text(
        json.dumps({**manifest, "build_id": new})
    )
    assert builder.build("base").build_id == new  # cached now: a no-op that records the stamp
    assert find_image(dd, "base").build_id == new
