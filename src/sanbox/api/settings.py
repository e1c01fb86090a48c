"""Server settings: where the data lives, which database, where to listen."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..host.layout import DataDir, default_data_dir
from ..store.db import sqlite_url

DEFAULT_HOST = "127.0.0.1"
DEFAULT_ORG = "default"  # made by the first start; the short published-port URLs are its
DEFAULT_PORT = 7070
MIB = 1024 * 1024


def default_client_config() -> Path:
    env = os.environ.get("SANBOX_CONFIG")
    if env:
        return Path(env)
    return Path(os.path.expanduser("~/.config/sanbox/config.toml"))


@dataclass(frozen=True)
class ServerSettings:
    data_dir: Path
    database_url: str | None = None
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    client_config: Path | None = None  # written on first start (None: don't write)
    watch_interval: float = 2.0
    upstream_dns: str | None = None  # host[:port] the DNS filter and proxy resolve with
    ca_bundle: Path | None = None  # CAs trusted for upstream TLS (the secret proxy's)
    port_domain: str = "localhost"  # published ports: http://PORT-NAME.ORG.<domain>:<port>/
    tenant_private_ranges: str | None = None  # allow rules may open these: "10.20.0.0/16,..."
    egress_max_connections: int = 512  # open egress proxy connections, per computer
    exec_max_output: int = 10 * MIB  # kept per stream by POST /exec (SANBOX_EXEC_MAX_OUTPUT)
    max_body_bytes: int = MIB  # request bodies but file uploads (SANBOX_MAX_BODY_BYTES)
    disk_overcommit: float = 1.0  # thin disks may add up to this times the free space
    secrets_key_file: Path | None = (
        None  # the key secrets are sealed under (SANBOX_SECRETS_KEY_FILE)
    )
    strict_placeholders: bool = False  # refuse a placeholder sent to a host not its secret's
    crash_at: str | None = None  # TEST ONLY: die at this step (SANBOX_TEST_CRASH_AT, faults.py)

    @classmethod
    def from_env(cls, **overrides: object) -> ServerSettings:
        values: dict[str, object] = {
            "data_dir": default_data_dir(),
            "database_url": os.environ.get("SANBOX_DATABASE_URL") or None,
            "client_config": default_client_config(),
            "upstream_dns": os.environ.get("SANBOX_UPSTREAM_DNS") or None,
            "ca_bundle": Path(os.environ["SANBOX_CA_BUNDLE"])
            if os.environ.get("SANBOX_CA_BUNDLE")
            else None,
            "tenant_private_ranges": os.environ.get("SANBOX_TENANT_PRIVATE_RANGES") or None,
            "egress_max_connections": int(os.environ.get("SANBOX_EGRESS_MAX_CONNECTIONS") or 512),
            "crash_at": os.environ.get("SANBOX_TEST_CRASH_AT") or None,  # the vm tier's faults
        }
        for name, env in (("exec_max_output", "SANBOX_EXEC_MAX_OUTPUT"),
                          ("max_body_bytes", "SANBOX_MAX_BODY_BYTES")):  # fmt: skip
            if os.environ.get(env):
                values[name] = int(os.environ[env])
        if os.environ.get("SANBOX_SECRETS_KEY_FILE"):
            values["secrets_key_file"] = Path(os.environ["SANBOX_SECRETS_KEY_FILE"])
        placeholders = os.environ.get("SANBOX_SECRET_PLACEHOLDERS", "pass")
        if placeholders not in ("pass", "refuse"):
            raise ValueError("SANBOX_SECRET_PLACEHOLDERS is `pass` or `refuse`")
        values["strict_placeholders"] = placeholders == "refuse"
        if os.environ.get("SANBOX_DISK_OVERCOMMIT"):
            values["disk_overcommit"] = float(os.environ["SANBOX_DISK_OVERCOMMIT"])
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]

    @property
    def layout(self) -> DataDir:
        return DataDir(self.data_dir)

    @property
    def db_url(self) -> str:
        return self.database_url or sqlite_url(self.data_dir / "sanbox.db")

    @property
    def upstream(self) -> tuple[str, int] | None:
        if not self.upstream_dns:
            return None
        host, _, port = self.upstream_dns.partition(":")
        return host, int(port or 53)

    def port_url(self, port: int, name: str, org: str) -> str:
        """The URL of a published port: `PORT-NAME.ORG.<domain>`, or `PORT-NAME.<domain>` for the
        default org (the short form means the default org only, so it never becomes ambiguous)."""
        host = f"{port}-{name}" if org == DEFAULT_ORG else f"{port}-{name}.{org}"
        return f"http://{host}.{self.port_domain}:{self.port}/"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"
