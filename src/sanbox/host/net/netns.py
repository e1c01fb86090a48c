"""A computer's network namespace with its tap device: created idempotently before each boot
(namespaces do not survive a host reboot), removed with the computer."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from ..drivers import NetAttachment
from ..errors import HostError, MissingToolError
from .addresses import GATEWAY_CIDR, GATEWAY_IP, GATEWAY_MAC, GUEST_CIDR, GUEST_MAC, TAP, netns_name


class NetworkError(HostError):
    code = "network_error"


async def ip(*args: str, check: bool = True, stdin: str | None = None) -> str:
    try:
        proc = await asyncio.create_subprocess_exec(
            "ip",
            *args,
            stdin=None if stdin is None else asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except FileNotFoundError:
        raise MissingToolError("ip", "iproute2") from None
    out, err = await proc.communicate(None if stdin is None else stdin.encode())
    if check and proc.returncode != 0:
        steps = "" if stdin is None else f" (its steps: {'; '.join(stdin.splitlines())})"
        raise NetworkError(f"`ip {' '.join(args)}` failed: {err.decode().strip()}{steps}")
    return out.decode()


def netns_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


class Network:
    """Per-computer namespaces of one data dir."""

    def __init__(self, computers_dir: Path, tag: str) -> None:
        self.computers_dir = computers_dir
        self.tag = tag

    def netns(self, computer_id: str) -> str:
        return netns_name(self.tag, computer_id)

    async def ensure(self, computer_id: str) -> NetAttachment:
        """The computer's namespace and tap, created if missing (idempotent)."""
        ns = self.netns(computer_id)
        if netns_exists(ns):
            links = await ip("-n", ns, "-o", "link", "show")
        else:
            await ip("netns", "add", ns)
            links = ""  # a new namespace has only its loopback
        steps = ["link set lo up"]
        if f" {TAP}:" not in links:
            steps += [
                f"tuntap add dev {TAP} mode tap",
                f"link set {TAP} address {GATEWAY_MAC}",
                f"addr add {GATEWAY_CIDR} dev {TAP}",
            ]
        steps.append(f"link set {TAP} up")
        # one `ip` for all of them (it stops at the first that fails; the error lists the steps)
        await ip("-n", ns, "-batch", "-", stdin="".join(f"{step}\n" for step in steps))
        return NetAttachment(
            tap=TAP,
            mac=GUEST_MAC,
            guest_cidr=GUEST_CIDR,
            gateway=GATEWAY_IP,
            dns=GATEWAY_IP,
            netns=ns,
        )

    async def remove(self, computer_id: str) -> None:
        ns = self.netns(computer_id)
        if netns_exists(ns):
            await ip("netns", "del", ns, check=False)

    def namespaces(self) -> list[str]:
        """This data dir's namespaces on this host (for the reconciler's orphan sweep)."""
        try:
            names = os.listdir("/run/netns")
        except FileNotFoundError:
            return []
        return sorted(n for n in names if n.startswith(f"sb{self.tag}-"))

    def computer_of(self, netns: str) -> str:
        return netns.removeprefix(f"sb{self.tag}-")
