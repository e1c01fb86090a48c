"""What the guest agent says of its guest when asked: a ping and its metrics, each checked as
every answer of a guest is (`reply.py`: a malformed one is `bad_reply`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import reply


@dataclass(frozen=True)
class Ping:
    uptime: float
    boot_id: str
    agent_version: str
    rtt: float


@dataclass(frozen=True)
class Metrics:
    cpu_count: int
    cpu_seconds: dict[str, float]
    load: tuple[float, float, float]
    memory: dict[str, int]
    disk: dict[str, int]
    uptime: float
    time: float


def ping_of(body: dict[str, Any], rtt: float) -> Ping:
    return Ping(
        uptime=reply.number(body.get("uptime"), "uptime"),
        boot_id=reply.text(body.get("boot_id"), "boot id"),
        agent_version=reply.text(body.get("agent_version"), "version"),
        rtt=rtt,
    )


def metrics_of(body: dict[str, Any]) -> Metrics:
    load = [reply.number(x, "load") for x in reply.items(body.get("load"), "load")]
    if len(load) != 3:
        raise reply.bad_reply("load", "three numbers")

    def numbers(key: str) -> dict[str, float]:
        return {k: reply.number(v, key) for k, v in reply.record(body.get(key), key).items()}

    def integers(key: str) -> dict[str, int]:
        return {k: reply.integer(v, key) for k, v in reply.record(body.get(key), key).items()}

    return Metrics(
        cpu_count=reply.integer(body.get("cpu_count"), "cpu count"),
        cpu_seconds=numbers("cpu_seconds"),
        load=(load[0], load[1], load[2]),
        memory=integers("memory"),
        disk=integers("disk"),
        uptime=reply.number(body.get("uptime"), "uptime"),
        time=reply.number(body.get("time"), "time"),
    )
