"""The config file holds an API key: it is the owner's alone whatever it was before (`os.open`'s
0600 applied to a new file only, so one made 0644 by hand or by an editor stayed readable by
all), its folder made 0700, and it is replaced whole (a write cut midway leaves the key that was
there)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from sanbox.sdk.config import read_config_file, write_config_file

pytestmark = pytest.mark.unit


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_config_file_readable_by_all_becomes_the_owners(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('url = "http://a"\n')
    path.chmod(0o644)
    write_config_file({"url": "http://a", "api_key": "sbk_x"}, path)
    assert mode(path) == 0o600
    assert read_config_file(path) == {"url": "http://a", "api_key": "sbk_x"}
    assert [p.name for p in tmp_path.iterdir()] == ["config.toml"]  # no temporary file left


def test_a_new_config_folder_is_the_owners(tmp_path: Path) -> None:
    path = tmp_path / "home" / "sanbox" / "config.toml"
    write_config_file({"api_key": "sbk_x"}, path)
    assert mode(path.parent) == 0o700 and mode(path) == 0o600


def test_a_linked_config_file_stays_a_link(tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "sanbox.toml"
    real.parent.mkdir()
    real.write_text("")
    path = tmp_path / "config.toml"
    path.symlink_to(real)
    write_config_file({"api_key": "sbk_x"}, path)
    assert path.is_symlink() and mode(real) == 0o600
    assert read_config_file(path) == {"api_key": "sbk_x"}
