"""`client.secrets`: credentials the egress proxy adds to a computer's requests for the hosts
each secret lists; the computer itself only ever holds a placeholder (`sbx_ph_...`).

    await client.secrets.set("openai", key, hosts=["api.openai.com"])  # create, or rotate
    binding = await client.secrets.bind("openai", "work", env="OPENAI_API_KEY")
    binding.placeholder                                                  # what `work` sees

A secret's value is write-only: `set` sends it once and no record, repr, log line or error of
this SDK holds it afterwards.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .paths import segment
from .types import Secret, SecretBinding

if TYPE_CHECKING:
    from .client import AsyncSanbox


def _secret_path(name: str) -> str:
    return f"/v1/secrets/{segment(name)}"


def _binding_path(name: str, computer: str) -> str:
    return f"/v1/computers/{segment(computer)}/secrets/{segment(name)}"


class AsyncSecrets:
    """The org's secrets and their bindings to computers."""

    def __init__(self, client: AsyncSanbox) -> None:
        self._client = client

    async def set(
        self,
        name: str,
        value: str,
        hosts: Iterable[str],
        header: str | None = None,
        placeholder_only: bool = False,
    ) -> Secret:
        """Create the secret `name`, or rotate it (its `version` goes up by one); computers it is
        bound to send the new value from their next request, without a restart.

        `hosts`: exact names, or `*.example.com` for the names below it (not itself). `header`:
        the header written on those requests, `{value}` standing for the value (default
        `Authorization: Bearer {value}`); `placeholder_only`: add no header, only replace the
        placeholder where the computer sends it. A value, host or header the server refuses
        raises `InvalidSecretError`, whose message never holds the value."""
        body = {
            "value": value,
            "hosts": list(hosts),
            "header": header,
            "placeholder_only": placeholder_only,
        }
        data = await self._client.http.json("PUT", _secret_path(name), json_body=body)
        return Secret.from_json(data)

    async def list(self) -> builtins.list[Secret]:
        data = await self._client.http.json("GET", "/v1/secrets")
        return [Secret.from_json(s) for s in data.get("secrets", [])]

    async def get(self, name: str) -> Secret:
        return Secret.from_json(await self._client.http.json("GET", _secret_path(name)))

    async def delete(self, name: str) -> Secret:
        """Delete a secret and its bindings: no request carries it from then on."""
        return Secret.from_json(await self._client.http.json("DELETE", _secret_path(name)))

    async def bind(self, name: str, computer: str, env: str | None = None) -> SecretBinding:
        """Bind secret `name` to `computer` (id or name): processes Sanbox starts in it get the
        binding's placeholder in the variable `env`, and its requests to the secret's hosts
        leave with the value instead."""
        body: dict[str, Any] = {"env": env}
        data = await self._client.http.json("PUT", _binding_path(name, computer), json_body=body)
        return SecretBinding.from_json(data)

    async def unbind(self, name: str, computer: str) -> SecretBinding:
        """Unbind it: `BindingNotFoundError` if it was not bound to that computer."""
        data = await self._client.http.json("DELETE", _binding_path(name, computer))
        return SecretBinding.from_json(data)

    async def bindings(self, computer: str) -> builtins.list[SecretBinding]:
        """The secrets bound to `computer`."""
        path = f"/v1/computers/{segment(computer)}/secrets"
        data = await self._client.http.json("GET", path)
        return [SecretBinding.from_json(b) for b in data.get("bindings", [])]
