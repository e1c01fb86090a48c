"""Egress for computers: the DNS filter (a computer's only resolver, answering allowed names
only), the stub resolver it and the egress proxy use, the DNS message codec, the sniffers that
read the host a connection asks for (TLS SNI, HTTP Host), and the secret proxy (TLS intercepted
for the hosts a bound secret lists, the secret added to each request)."""

from .dns_filter import DnsFilter
from .dnsmsg import DnsFormatError, Query, Rcode, Response
from .injection import Injection
from .intercept import Interception, intercept
from .resolver import ResolveError, Resolver, system_upstream
from .sniff import (
    INCOMPLETE,
    NOT_HTTP,
    NOT_TLS,
    Incomplete,
    NotHttp,
    NotTls,
    http_host,
    tls_server_name,
)

__all__ = [
    "INCOMPLETE",
    "NOT_HTTP",
    "NOT_TLS",
    "DnsFilter",
    "DnsFormatError",
    "Incomplete",
    "Injection",
    "Interception",
    "NotHttp",
    "NotTls",
    "Query",
    "Rcode",
    "ResolveError",
    "Resolver",
    "Response",
    "http_host",
    "intercept",
    "system_upstream",
    "tls_server_name",
]
