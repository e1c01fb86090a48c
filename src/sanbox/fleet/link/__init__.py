"""How hosts and the control plane reach each other: the host agent (agent.py), a host reached over
the network (remote.py), the values on the wire (wire.py) and the fleet's certificates (pki.py)."""
