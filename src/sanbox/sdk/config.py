"""Where the SDK finds its server and key: arguments, then env, then the config file.

The file is TOML at `$SANBOX_CONFIG`, else `~/.config/sanbox/config.toml`::

    url = "http://127.0.0.1:7070"
    api_key = "sbk_..."
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import SanboxError

DEFAULT_URL = "http://127.0.0.1:7070"
URL_ENV = "SANBOX_URL"
API_KEY_ENV = "SANBOX_API_KEY"
CONFIG_ENV = "SANBOX_CONFIG"


class ConfigError(SanboxError):
    """The config file exists but cannot be read as TOML."""


@dataclass(frozen=True)
class ClientConfig:
    url: str
    api_key: str | None


def config_path() -> Path:
    override = os.environ.get(CONFIG_ENV)
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "sanbox" / "config.toml"


def read_config_file(path: Path | None = None) -> dict[str, str]:
    """The file's string settings; an absent file is an empty config."""
    import tomllib  # here: with SANBOX_URL and SANBOX_API_KEY set, no file is read (~0.01 s)

    path = path or config_path()
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}", code="invalid_config") from exc
    return {k: v for k, v in data.items() if isinstance(v, str)}


def write_config_file(settings: dict[str, str], path: Path | None = None) -> Path:
    """Write string settings as TOML, owner-only whatever the file was (it holds a key: one
    made 0644 by hand, or by an editor, is 0600 after), in a folder made 0700. Written whole
    beside the file, then put in its place: a write cut midway leaves the key that was there."""
    from .local_file import WholeFile

    path = path or config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with WholeFile(path, mode=0o600) as file:
        file.write(config_text(dict(sorted(settings.items()))).encode())
    return path


def config_text(settings: dict[str, str]) -> str:
    """String settings as the config file's TOML, in their order (the server's first start
    writes one too)."""
    lines = [f"{key} = {_toml_string(value)}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"


def resolve_config(url: str | None = None, api_key: str | None = None) -> ClientConfig:
    """Arguments win, then `SANBOX_URL`/`SANBOX_API_KEY`, then the file, then the default URL."""
    file: dict[str, str] | None = None

    def from_file(key: str) -> str | None:
        nonlocal file
        if file is None:
            file = read_config_file()
        return file.get(key)

    resolved_url = url or os.environ.get(URL_ENV) or from_file("url") or DEFAULT_URL
    resolved_key = api_key or os.environ.get(API_KEY_ENV) or from_file("api_key")
    return ClientConfig(url=resolved_url.rstrip("/"), api_key=resolved_key)


def _toml_string(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'
