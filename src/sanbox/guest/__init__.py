"""The in-VM agent (stdlib only) and the wire protocol it shares with the host.

This folder is copied into the guest disk as the standalone package ``sanbox_guest``
and started with ``python3 -m sanbox_guest.agent``. Modules here import each other
only with relative imports and import nothing outside the standard library.
"""
