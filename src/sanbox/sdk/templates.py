"""`client.templates`: the built-in templates and the org's own, built from a spec.

    started = await client.templates.build("examples/templates/notes")   # a folder or a file
    async for record in client.templates.logs("notes", follow=True):      # step, output, done
        ...
    template = await client.templates.get("notes")

`client.pools.set("notes", 2)` keeps two computers of it ready: a create then claims one.

`build` sends the spec and only the files its steps copy; it returns at once (`building` False:
nothing changed since the last build). `wait` follows the log to its end and returns the
template, raising `BuildFailedError` with the reason if the build failed."""

from __future__ import annotations

import builtins
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import BuildFailedError, InvalidRequestError
from .paths import segment
from .types import BuildCachePruned, Pool, Template

if TYPE_CHECKING:
    from .client import AsyncSanbox

BUILD_TIMEOUT = 3600.0


@dataclass(frozen=True)
class BuildStarted:
    template: Template
    building: bool  # False: it was up to date, no build runs


def _path(ref: str) -> str:
    return f"/v1/templates/{segment(ref)}"


def _in(region: str | None) -> dict[str, str | None]:
    return {"region": region}


class AsyncTemplates:
    def __init__(self, client: AsyncSanbox) -> None:
        self._client = client

    async def list(self) -> builtins.list[Template]:
        data = await self._client.http.json("GET", "/v1/templates")
        return [Template.from_json(t) for t in data.get("templates", [])]

    async def get(self, name: str, region: str | None = None) -> Template:
        """A template (a template is built per region: its build in `region`, else the only one
        or the one in the org's home region)."""
        data = await self._client.http.json("GET", _path(name), params=_in(region))
        return Template.from_json(data)

    async def delete(self, name: str, region: str | None = None) -> Template:
        """Delete a template of the org (its build in `region`); computers made from it keep
        working."""
        data = await self._client.http.json("DELETE", _path(name), params=_in(region))
        return Template.from_json(data)

    async def prune(self) -> BuildCachePruned:
        """Delete the org's cached build steps that none of its templates stands on (steps of
        older versions of a spec, those of deleted templates); every template still rebuilds
        from all of its cached steps. ConflictError (`template_building`) while a build runs."""
        return BuildCachePruned.from_json(
            await self._client.http.json("POST", "/v1/build-cache/prune", timeout=600.0)
        )

    async def rebuild(self, name: str, region: str | None = None) -> BuildStarted:
        """Build the template again from what its last build was given (kept by the server);
        in another `region`, that builds it there."""
        data = await self._client.http.json(
            "POST", f"{_path(name)}/rebuild", params=_in(region), timeout=600.0
        )
        return BuildStarted(Template.from_json(data["template"]), bool(data["building"]))

    async def build(
        self, spec: str | Path, name: str | None = None, region: str | None = None
    ) -> BuildStarted:
        """Start building the template whose spec is `spec` (a sanbox.toml, or its folder), in
        `region` (default: the org's home region on a fleet). The spec is checked here first: a
        bad one raises InvalidRequestError with its line."""
        from ..templates.context import ContextError, pack  # the spec parser: only here
        from ..templates.spec import SpecError

        try:
            body, _ = pack(Path(spec))
        except (SpecError, ContextError) as exc:
            code = "invalid_spec" if isinstance(exc, SpecError) else "invalid_context"
            raise InvalidRequestError(str(exc), code=code) from None
        data = await self._client.http.json(
            "POST",
            "/v1/templates",
            params={"name": name, "region": region},
            content=body,
            headers={"Content-Type": "application/x-tar"},
            timeout=600.0,
        )
        return BuildStarted(Template.from_json(data["template"]), bool(data["building"]))

    async def logs(
        self, name: str, follow: bool = False, region: str | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """The last build's log records (`step`, `output`, `done`); `follow`: until it ends."""
        params = {"follow": "true" if follow else None, "region": region}
        timeout = BUILD_TIMEOUT if follow else None
        async with self._client.http.stream(
            "GET", _path(name) + "/logs", params=params, timeout=timeout
        ) as response:
            async for line in response.aiter_lines():
                if line.strip():
                    yield json.loads(line)

    async def wait(
        self,
        name: str,
        on_record: Callable[[dict[str, Any]], None] | None = None,
        region: str | None = None,
    ) -> Template:
        """Follow the build to its end; the template, or BuildFailedError with the reason."""
        outcome: dict[str, Any] = {}
        async for record in self.logs(name, follow=True, region=region):
            if on_record is not None:
                on_record(record)
            if record.get("type") == "done":
                outcome = record
        template = await self.get(name, region)
        if outcome.get("state") == "failed" or template.state == "failed":
            reason = outcome.get("message") or template.error or "the build failed"
            raise BuildFailedError(str(reason), code="build_failed", status=None)
        return template


class AsyncPools:
    """`client.pools`: warm pools (creates of a pooled template claim a ready computer)."""

    def __init__(self, client: AsyncSanbox) -> None:
        self._client = client

    async def set(self, template: str, size: int) -> Pool:
        """Keep `size` computers of `template` ready (0 empties the pool)."""
        path = f"/v1/pools/{segment(template)}"
        return Pool.from_json(await self._client.http.json("PUT", path, json_body={"size": size}))

    async def list(self) -> builtins.list[Pool]:
        data = await self._client.http.json("GET", "/v1/pools")
        return [Pool.from_json(p) for p in data.get("pools", [])]
