"""Per-computer networking: slots (address math), namespaces with taps and uplinks."""

from .netns import Network, NetworkError, netns_exists
from .slot import GUEST_IP, Slot, netns_name

__all__ = ["GUEST_IP", "Network", "NetworkError", "Slot", "netns_exists", "netns_name"]
