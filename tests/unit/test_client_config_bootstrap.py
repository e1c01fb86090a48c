"""The server's first start writes its host-admin key (shown once) to the client config, but never
over one that is there: that file may hold the only copy of a key for another server. The new
config goes beside it, named for this server, each made only if new."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from sanbox.api.bootstrap import write_client_config

pytestmark = pytest.mark.unit

URL = "http://127.0.0.1:7070"
OTHER = 'url = "https://elsewhere.example"\napi_key = "sbk_the_only_copy"\n'


def test_no_config_there_is_written_owner_only_in_an_owners_folder(tmp_path: Path) -> None:
    path = tmp_path / "sanbox" / "config.toml"
    assert write_client_config(path, URL, "sbk_new") == path
    assert path.read_text() == f'url = "{URL}"\napi_key = "sbk_new"\n'
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_a_config_there_is_kept_and_the_key_goes_beside_it(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(OTHER)
    first = write_client_config(path, URL, "sbk_new")
    again = write_client_config(path, URL, "sbk_newer")  # another data dir on the same port
    assert path.read_text() == OTHER
    assert first == tmp_path / "config-127.0.0.1-7070.toml"
    assert again == tmp_path / "config-127.0.0.1-7070-2.toml"
    assert 'api_key = "sbk_new"' in first.read_text()
    assert 'api_key = "sbk_newer"' in again.read_text()
    assert stat.S_IMODE(again.stat().st_mode) == 0o600


def test_an_empty_config_holds_nothing_to_keep(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("\n")
    assert write_client_config(path, URL, "sbk_new") == path
    assert 'api_key = "sbk_new"' in path.read_text()
