"""Hypervisor drivers, one folder each (firecracker/)."""
