"""Server settings: where the data lives, which database, where to listen."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from ipaddress import IPv4Network, IPv6Network, ip_network
from pathlib import Path

from ..control import events
from ..control.audit import ORG_CAP, RETENTION_DAYS
from ..control.keys import MAX_KEYS
from ..control.pools import MAX_MEMBERS, MAX_POOLS
from ..control.rates import BURST, RATE
from ..control.retention import OPERATION_RETENTION_DAYS
from ..control.secrets import MAX_SECRETS
from ..control.templates import MAX_TEMPLATES
from ..control.usage.report_slots import PER_ORG as USAGE_REPORTS_PER_ORG
from ..control.usage.report_slots import TOTAL as USAGE_REPORTS_TOTAL
from ..host.data.layout import DataDir, default_data_dir
from ..host.egress.budget import MAX_CONNECTIONS_PER_ORG, MAX_CONNECTIONS_TOTAL
from ..host.egress.dns_bounds import DnsBounds
from ..host.settings import dns_bounds_of, upstream_of
from ..store.db import sqlite_url
from .open_requests import PER_KEY as OPEN_PER_KEY
from .open_requests import PER_ORG as OPEN_PER_ORG
from .ports.public_relays import PER_COMPUTER as PUBLIC_PORT_CONNECTIONS

DEFAULT_HOST = "127.0.0.1"
DEFAULT_ORG = "default"  # made by the first start; the short published-port URLs are its
DEFAULT_PORT = 7070
MIB = 1024 * 1024
MCP_SESSIONS_PER_KEY = 16  # MCP sessions a key may hold open at /mcp
MCP_SESSIONS_PER_ORG = 64  # ... and an org, all its keys (an org may make any number of keys)


def trusted_networks(text: str) -> tuple[str, ...]:
    """`SANBOX_TRUSTED_PROXIES`: comma-separated addresses or CIDRs (ValueError if one is not)."""
    cidrs = tuple(part.strip() for part in text.split(",") if part.strip())
    for cidr in cidrs:
        ip_network(cidr, strict=False)
    return cidrs


_NUMBERS: tuple[tuple[str, str, type[int] | type[float]], ...] = (
    ("exec_max_output", "SANBOX_EXEC_MAX_OUTPUT", int),
    ("max_body_bytes", "SANBOX_MAX_BODY_BYTES", int),
    ("key_rate", "SANBOX_KEY_RATE", float),
    ("key_burst", "SANBOX_KEY_BURST", int),
    ("audit_retention_days", "SANBOX_AUDIT_RETENTION_DAYS", float),
    ("audit_org_cap", "SANBOX_AUDIT_ORG_CAP", int),
    ("event_retention_days", "SANBOX_EVENT_RETENTION_DAYS", float),
    ("event_org_cap", "SANBOX_EVENT_ORG_CAP", int),
    ("operation_retention_days", "SANBOX_OPERATION_RETENTION_DAYS", float),
    ("mcp_sessions_per_key", "SANBOX_MCP_SESSIONS_PER_KEY", int),
    ("mcp_sessions_per_org", "SANBOX_MCP_SESSIONS_PER_ORG", int),
    ("open_requests_per_key", "SANBOX_OPEN_REQUESTS_PER_KEY", int),
    ("open_requests_per_org", "SANBOX_OPEN_REQUESTS_PER_ORG", int),
    ("public_port_connections", "SANBOX_PUBLIC_PORT_CONNECTIONS", int),
    ("org_max_pools", "SANBOX_ORG_MAX_POOLS", int),
    ("org_max_pool_members", "SANBOX_ORG_MAX_POOL_MEMBERS", int),
    ("org_max_keys", "SANBOX_ORG_MAX_KEYS", int),
    ("org_max_secrets", "SANBOX_ORG_MAX_SECRETS", int),
    ("org_max_templates", "SANBOX_ORG_MAX_TEMPLATES", int),
    ("egress_max_connections_per_org", "SANBOX_EGRESS_MAX_CONNECTIONS_PER_ORG", int),
    ("egress_max_connections_total", "SANBOX_EGRESS_MAX_CONNECTIONS_TOTAL", int),
    ("usage_sample_interval", "SANBOX_USAGE_SAMPLE_INTERVAL", float),
    ("usage_running_period", "SANBOX_USAGE_RUNNING_PERIOD", float),
    ("usage_reports_per_org", "SANBOX_USAGE_REPORTS_PER_ORG", int),
    ("usage_reports_total", "SANBOX_USAGE_REPORTS_TOTAL", int),
    ("host_lease", "SANBOX_HOST_LEASE", float),
    ("host_lost_after", "SANBOX_HOST_LOST_AFTER", float),
)


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
    host_lease: float = (
        15.0  # a fleet host's lease (docs/fleet.md): no renewal for this long: suspect
    )
    host_lost_after: float = 60.0  # ... and for this long: lost
    upstream_dns: str | None = None  # host[:port] the DNS filter and proxy resolve with
    ca_bundle: Path | None = None  # CAs trusted for upstream TLS (the secret proxy's)
    port_domain: str = "localhost"  # published ports: http://PORT-NAME.ORG.<domain>:<port>/
    e2b_domain: str | None = None  # E2B's `domain` (SANBOX_E2B_DOMAIN); None: the port domain
    e2b_create_user: bool = True  # E2B's default user `user` is made in a guest without it
    tenant_private_ranges: str | None = None  # allow rules may open these: "10.20.0.0/16,..."
    egress_max_connections: int = 512  # open egress proxy connections, per computer
    egress_max_connections_per_org: int = MAX_CONNECTIONS_PER_ORG  # of all its computers
    egress_max_connections_total: int = MAX_CONNECTIONS_TOTAL  # of every computer
    dns_bounds: DnsBounds = DnsBounds()  # DNS rate, cache sizes (SANBOX_EGRESS_DNS_*)
    exec_max_output: int = 10 * MIB  # kept per stream by POST /exec (SANBOX_EXEC_MAX_OUTPUT)
    max_body_bytes: int = MIB  # request bodies but file uploads (SANBOX_MAX_BODY_BYTES)
    disk_overcommit: float = 1.0  # thin disks may add up to this times the free space
    disk_low_watermark: float = 10.0  # % of the data filesystem overcommit keeps free
    secrets_key_file: Path | None = (
        None  # the key secrets are sealed under (SANBOX_SECRETS_KEY_FILE)
    )
    strict_placeholders: bool = False  # refuse a placeholder sent to a host not its secret's
    substitute_any_header: bool = False  # a placeholder is replaced in any header, not its own
    key_rate: float = RATE  # requests a second per API key, sustained (SANBOX_KEY_RATE)
    key_burst: int = BURST  # ... and at once (SANBOX_KEY_BURST)
    audit_retention_days: float = RETENTION_DAYS  # audit records older go (SANBOX_AUDIT_...)
    audit_org_cap: int = ORG_CAP  # an org's newest records kept (SANBOX_AUDIT_ORG_CAP)
    event_retention_days: float = events.RETENTION_DAYS  # (SANBOX_EVENT_RETENTION_DAYS)
    event_org_cap: int = events.ORG_CAP  # an org's newest events kept (SANBOX_EVENT_ORG_CAP)
    operation_retention_days: float = OPERATION_RETENTION_DAYS  # finished ones older go
    mcp_sessions_per_key: int = MCP_SESSIONS_PER_KEY  # (SANBOX_MCP_SESSIONS_PER_KEY)
    mcp_sessions_per_org: int = MCP_SESSIONS_PER_ORG  # (SANBOX_MCP_SESSIONS_PER_ORG)
    open_requests_per_key: int = OPEN_PER_KEY  # streams etc. open at once (api/open_requests.py)
    open_requests_per_org: int = OPEN_PER_ORG  # ... of all an org's keys
    public_port_connections: int = PUBLIC_PORT_CONNECTIONS  # open to one computer's public ports
    org_max_pools: int = MAX_POOLS  # pools of a size above 0 per org (SANBOX_ORG_MAX_POOLS)
    org_max_pool_members: int = MAX_MEMBERS  # their sizes in all (SANBOX_ORG_MAX_POOL_MEMBERS)
    org_max_keys: int = MAX_KEYS  # usable API keys per org (SANBOX_ORG_MAX_KEYS)
    org_max_secrets: int = MAX_SECRETS  # secrets per org (SANBOX_ORG_MAX_SECRETS)
    org_max_templates: int = MAX_TEMPLATES  # templates per org (SANBOX_ORG_MAX_TEMPLATES)
    trusted_proxies: tuple[str, ...] = ()  # CIDRs whose X-Forwarded-For is believed
    usage_sample_interval: float = 5.0  # seconds between usage checks and guest metrics
    usage_running_period: float = 60.0  # a running computer's usage interval is cut this often
    metering: bool = True  # usage intervals written with every state change (off: benchmarks)
    usage_reports_per_org: int = USAGE_REPORTS_PER_ORG  # usage reads at once, in threads, per org
    usage_reports_total: int = USAGE_REPORTS_TOTAL  # ... and of every org
    metrics_token: str | None = None  # may scrape /metrics besides host-admin keys
    usage_source: str = "sanbox"  # the CloudEvents `source` of usage: one per deployment
    fleet_dir: Path | None = None  # the fleet's CAs (SANBOX_FLEET_DIR); None: <data dir>/fleet
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
            "dns_bounds": dns_bounds_of(os.environ),
            "crash_at": os.environ.get("SANBOX_TEST_CRASH_AT") or None,  # the vm tier's faults
            "metrics_token": os.environ.get("SANBOX_METRICS_TOKEN") or None,
            "usage_source": os.environ.get("SANBOX_USAGE_SOURCE") or None,
            "e2b_domain": os.environ.get("SANBOX_E2B_DOMAIN") or None,
        }
        for name, env, kind in _NUMBERS:
            if os.environ.get(env):
                values[name] = kind(os.environ[env])
        if os.environ.get("SANBOX_TRUSTED_PROXIES"):
            values["trusted_proxies"] = trusted_networks(os.environ["SANBOX_TRUSTED_PROXIES"])
        if os.environ.get("SANBOX_FLEET_DIR"):
            values["fleet_dir"] = Path(os.environ["SANBOX_FLEET_DIR"])
        if os.environ.get("SANBOX_SECRETS_KEY_FILE"):
            values["secrets_key_file"] = Path(os.environ["SANBOX_SECRETS_KEY_FILE"])
        placeholders = os.environ.get("SANBOX_SECRET_PLACEHOLDERS", "pass")
        if placeholders not in ("pass", "refuse"):
            raise ValueError("SANBOX_SECRET_PLACEHOLDERS is `pass` or `refuse`")
        values["strict_placeholders"] = placeholders == "refuse"
        anywhere = os.environ.get("SANBOX_SECRET_SUBSTITUTE_ANY_HEADER", "0")
        if anywhere not in ("0", "1"):
            raise ValueError("SANBOX_SECRET_SUBSTITUTE_ANY_HEADER is 0 or 1")
        values["substitute_any_header"] = anywhere == "1"
        if os.environ.get("SANBOX_METERING", "1") not in ("0", "1"):
            raise ValueError("SANBOX_METERING is 0 or 1")
        values["metering"] = os.environ.get("SANBOX_METERING", "1") == "1"
        if os.environ.get("SANBOX_DISK_OVERCOMMIT"):
            values["disk_overcommit"] = float(os.environ["SANBOX_DISK_OVERCOMMIT"])
        if os.environ.get("SANBOX_DISK_LOW_WATERMARK"):
            values["disk_low_watermark"] = float(os.environ["SANBOX_DISK_LOW_WATERMARK"])
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]

    @functools.cached_property
    def proxies(self) -> tuple[IPv4Network | IPv6Network, ...]:
        return tuple(ip_network(cidr, strict=False) for cidr in self.trusted_proxies)

    @property
    def layout(self) -> DataDir:
        return DataDir(self.data_dir)

    @property
    def db_url(self) -> str:
        return self.database_url or sqlite_url(self.data_dir / "sanbox.db")

    @property
    def upstream(self) -> tuple[str, int] | None:
        return upstream_of(self.upstream_dns)

    def port_url(self, port: int, name: str, org: str) -> str:
        """The URL of a published port: `PORT-NAME.ORG.<domain>`, or `PORT-NAME.<domain>` for the
        default org (the short form means the default org only, so it never becomes ambiguous)."""
        host = f"{port}-{name}" if org == DEFAULT_ORG else f"{port}-{name}.{org}"
        return f"http://{host}.{self.port_domain}:{self.port}/"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"
