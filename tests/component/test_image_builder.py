import json
from pathlib import Path

import pytest

from sanbox.host.errors import MissingToolError
from sanbox.host.image import BuildProgress, BuildStepError, ImageBuilder, find_image, recipe_for
from sanbox.host.image import builder as builder_module
from sanbox.host.image.errors import ImageNotFoundError
from sanbox.host.layout import DataDir

pytestmark = pytest.mark.component


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

    monkeypatch.setattr(builder_module.kernel, "fetch", no_mirror)
    dd = DataDir(tmp_path)
    with pytest.raises(BuildStepError, match="step 'kernel'.*check the network"):
        ImageBuilder(dd).build("base")
    assert list(dd.tmp.iterdir()) == []
    assert not (dd.images / "base").exists()
    with pytest.raises(ImageNotFoundError, match="sanbox image build base"):
        find_image(dd, "base")
