"""First start: an org named `default`, a host-admin API key (it manages every org: creates orgs
and their keys), and a client config so the CLI works with no flags. The key is shown once
(written to the client config, mode 0600, or beside one that is there: never over it) and stored
hashed."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from ..sdk.config import config_text, write_config_file
from ..store import Database, repo
from .settings import DEFAULT_ORG

log = logging.getLogger(__name__)


def write_client_config(path: Path, url: str, api_key: str) -> Path:
    """Write the client config with the first key; where it went. Never over a config that is
    there (a key for another server, shown once, would be lost for good): then beside it, in a
    file named for this server (`config-127.0.0.1-7070.toml`, `-2` after it if that is there
    too), made only if new."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    settings = {"url": url, "api_key": api_key}
    text = config_text(settings)
    for candidate in (path, *_beside(path, url)):
        try:
            fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            if candidate == path and not path.read_text().strip():  # an empty one holds nothing
                return write_config_file(settings, path)
            continue
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return candidate
    raise FileExistsError(f"{path} and {_TRIES} files beside it are there")


_TRIES = 100


def _beside(path: Path, url: str) -> Iterator[Path]:
    parts = urlsplit(url)
    server = re.sub(r"[^A-Za-z0-9.-]", "_", f"{parts.hostname or 'server'}-{parts.port or ''}")
    for n in range(1, _TRIES):
        tag = server if n == 1 else f"{server}-{n}"
        yield path.with_name(f"{path.stem}-{tag.strip('-')}{path.suffix}")


def bootstrap(db: Database, url: str, client_config: Path | None) -> str | None:
    """Create the default org and a host-admin key if there are no keys yet. Returns the key."""
    with db.session() as s:
        if repo.count_keys(s) > 0:
            return None
        org = repo.org_by_name(s, DEFAULT_ORG) or repo.create_org(s, DEFAULT_ORG)
        _key, plaintext = repo.create_key(s, org, "admin (first start)", host_admin=True)
    if client_config is None:
        return plaintext
    written = write_client_config(client_config, url, plaintext)
    if written == client_config:
        log.warning(
            "created org %r and a host-admin key; client config written to %s",
            DEFAULT_ORG,
            client_config,
        )
    else:
        log.warning(
            "created org %r and a host-admin key (shown once): %s holds another config, kept as "
            "it is; this server's URL and key are in %s: use it with SANBOX_CONFIG=%s, or move "
            "it over the other",
            DEFAULT_ORG,
            client_config,
            written,
            written,
        )
    return plaintext
