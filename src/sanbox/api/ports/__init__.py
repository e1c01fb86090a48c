"""Published ports: ``http://8080-NAME.ORG.localhost:7070/`` relayed to port 8080 inside NAME of ORG
(``8080-NAME.localhost``: the default org)."""

from .devtools import relay_port_http
from .host import PortHost, parse_port_host
from .relay import ByteStream, relay_http
from .websocket import relay_websocket

__all__ = [
    "ByteStream",
    "PortHost",
    "parse_port_host",
    "relay_http",
    "relay_port_http",
    "relay_websocket",
]
