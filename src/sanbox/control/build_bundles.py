"""A package step's host side (`template_build`): the bundle fetched on the host, within the
data filesystem's reserve, and pushed into the build computer streamed from its files (a bundle
is up to 2 GiB: never read whole into the server's memory)."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path

from ..host.door import AgentClient
from ..templates import fetch
from ..templates.spec import Step
from .capacity import low_watermark


async def fetched(
    org_id: str, step: Step, cache: Path, reserve_percent: float, status: Path | None
) -> fetch.Bundle:
    """The step's bundle for `org_id` (its own: bundles are not shared across orgs), fetched in
    a thread (it is blocking), refused or stopped when it would leave less than
    `reserve_percent` of the data filesystem free (the host's disk low watermark); an apt step
    resolves against the guest's dpkg `status`."""
    keep_free = low_watermark(cache, reserve_percent)
    if step.kind == "apt":
        assert status is not None
        apt = functools.partial(fetch.fetch_apt, keep_free=keep_free, org=org_id)
        return await asyncio.to_thread(apt, step.packages, status, cache)
    if step.kind == "pip":
        pip = functools.partial(fetch.fetch_pip, venv=step.venv, keep_free=keep_free, org=org_id)
        return await asyncio.to_thread(pip, step.packages, cache)
    npm = functools.partial(fetch.fetch_npm, keep_free=keep_free, org=org_id)
    return await asyncio.to_thread(npm, step.packages, cache)


async def push(client: AgentClient, bundle: fetch.Bundle) -> None:
    """Every file of the bundle to its place under `guest_dir`, each streamed from its path."""
    for name in bundle.files:
        await client.files.put(f"{bundle.guest_dir}/{name}", bundle.path / name, mode=0o755)
