"""A template build's computer leaves the host a core: two vCPUs at most (package installs are
mostly one process), one on a two-core host, where a second build or the host's other computers
would otherwise stall a build guest in its own spinlocks."""

from __future__ import annotations

import pytest

from sanbox.control.build_vms import build_vcpus

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("host", "vcpus"), [(1, 1), (2, 1), (3, 2), (64, 2)])
def test_a_build_computer_leaves_the_host_a_core(host: int, vcpus: int) -> None:
    assert build_vcpus(host) == vcpus
