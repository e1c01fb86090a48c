"""Published ports: ``http://8080-NAME.localhost:7070/`` relayed to port 8080 inside NAME."""

from .relay import ByteStream, parse_port_host, relay_http, relay_websocket

__all__ = ["ByteStream", "parse_port_host", "relay_http", "relay_websocket"]
