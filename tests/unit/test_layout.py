from pathlib import Path

import pytest

from sanbox.host.data.layout import DataDir
from sanbox.host.errors import LayoutError
from sanbox.host.image import Recipe, UnknownTemplateError, recipe_for

pytestmark = pytest.mark.unit


def test_computer_paths(tmp_path: Path) -> None:
    cdir = DataDir(tmp_path).computer("cmp_abc123")
    assert cdir.disk == tmp_path / "computers" / "cmp_abc123" / "disk.qcow2"  # a new one
    assert cdir.run.name == "run" and cdir.console_log.parent.name == "logs"


@pytest.mark.parametrize("bad", ["../etc", "a/b", "", "X", "cmp_ABC"])
def test_bad_computer_ids_are_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(LayoutError):
        DataDir(tmp_path).computer(bad)


def test_paths_outside_the_data_dir_are_refused(tmp_path: Path) -> None:
    dd = DataDir(tmp_path / "data")
    (tmp_path / "data").mkdir()
    assert dd.require_inside(tmp_path / "data" / "x.raw") == tmp_path / "data" / "x.raw"
    for outside in (
        tmp_path / "other.raw",
        tmp_path / "data" / ".." / "x.raw",
        Path("/etc/passwd"),
    ):
        with pytest.raises(LayoutError, match="outside the data dir"):
            dd.require_inside(outside)


def test_build_id_is_stable_and_follows_the_recipe() -> None:
    assert Recipe(name="base").build_id() == Recipe(name="base").build_id()
    assert (
        Recipe(name="base", mirror="http://elsewhere/debian").build_id()
        == Recipe(name="base").build_id()
    )
    assert Recipe(name="base", packages=("python3",)).build_id() != Recipe(name="base").build_id()


def test_unknown_template() -> None:
    with pytest.raises(UnknownTemplateError, match="known templates are base"):
        recipe_for("nope")
