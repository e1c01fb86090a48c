"""Per-computer networking: namespaces with a tap, a fail-closed firewall, and sockets inside
them for the server's DNS filter and egress proxy."""

from .addresses import GATEWAY_IP, GUEST_IP, netns_name
from .netns import Network, NetworkError, netns_exists

__all__ = ["GATEWAY_IP", "GUEST_IP", "Network", "NetworkError", "netns_exists", "netns_name"]
