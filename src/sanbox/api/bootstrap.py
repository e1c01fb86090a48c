"""First start: an org named `default`, a host-admin API key (it manages every org: creates orgs
and their keys), and a client config so the CLI works with no flags. The key is shown once
(written to the client config, mode 0600) and stored hashed."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ..store import Database, repo
from .settings import DEFAULT_ORG

log = logging.getLogger(__name__)


def write_client_config(path: Path, url: str, api_key: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f'url = "{url}"\napi_key = "{api_key}"\n')
    os.replace(tmp, path)


def bootstrap(db: Database, url: str, client_config: Path | None) -> str | None:
    """Create the default org and a host-admin key if there are no keys yet. Returns the key."""
    with db.session() as s:
        if repo.count_keys(s) > 0:
            return None
        org = repo.org_by_name(s, DEFAULT_ORG) or repo.create_org(s, DEFAULT_ORG)
        _key, plaintext = repo.create_key(s, org, "admin (first start)", host_admin=True)
    if client_config is not None:
        write_client_config(client_config, url, plaintext)
        log.warning(
            "created org %r and a host-admin key; client config written to %s",
            DEFAULT_ORG,
            client_config,
        )
    return plaintext
