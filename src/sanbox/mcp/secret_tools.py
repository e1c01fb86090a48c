"""The MCP tools for secrets: list them, bind one to a computer, unbind it.

There is deliberately no tool that sets a secret: its value would pass through the model's
context. A person sets secrets (`sanbox secret set NAME --value-stdin`, or the API); an agent
only binds them, and its computer sees a placeholder, never the value (no record holds one).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field

from ..sdk import Secret, SecretBinding
from .results import result

if TYPE_CHECKING:
    from .tools import Clients, Tool

Register = Callable[[str, ToolAnnotations], Callable[["Tool"], "Tool"]]

Ref = Annotated[str, Field(description="the computer's id (cmp_...) or name")]
SecretName = Annotated[str, Field(description="the secret's name (see list_secrets)")]


def describe_secret(s: Secret) -> str:
    """`openai: api.openai.com; Authorization: Bearer {value} (version 2)`."""
    rule = "placeholder only" if s.placeholder_only else (s.header or "Authorization header")
    return f"{s.name}: {', '.join(s.hosts)}; {rule} (version {s.version})"


def describe_binding(b: SecretBinding) -> str:
    where = f"${b.env} holds" if b.env else "no variable holds"
    return f"{b.secret} on {b.computer}: {where} the placeholder {b.placeholder}"


def _hints(read_only: bool, destructive: bool) -> ToolAnnotations:
    return ToolAnnotations(
        read_only_hint=read_only,
        destructive_hint=destructive,
        idempotent_hint=True,
        open_world_hint=False,
    )


def add_secret_tools(tool: Register, clients: Clients) -> None:
    """Register list_secrets, bind_secret and unbind_secret with `tool`."""

    @tool("list_secrets", _hints(read_only=True, destructive=False))
    async def list_secrets(
        ctx: Context[Any, Any],
        computer: Annotated[
            str | None, Field(description="also list the secrets bound to this computer")
        ] = None,
    ) -> CallToolResult:
        """List your org's secrets: name, the hosts each is sent to, how, never a value.

        Secrets are set by a person (`sanbox secret set`), never through these tools: no tool
        takes or returns a secret's value. Bind one to a computer with bind_secret."""
        async with clients(ctx) as sanbox:
            secrets = await sanbox.secrets.list()
            bound = await sanbox.secrets.bindings(computer) if computer is not None else None
        lines = [describe_secret(s) for s in secrets] or ["no secrets"]
        structured: dict[str, Any] = {"secrets": [s.to_json() for s in secrets]}
        if bound is not None:
            lines += [describe_binding(b) for b in bound] or [f"none bound to {computer}"]
            structured["bindings"] = [b.to_json() for b in bound]
        return result("\n".join(lines), structured)

    @tool("bind_secret", _hints(read_only=False, destructive=False))
    async def bind_secret(
        computer: Ref,
        name: SecretName,
        ctx: Context[Any, Any],
        env: Annotated[
            str | None,
            Field(
                description="environment variable that gets the placeholder, e.g. "
                "OPENAI_API_KEY; default: none"
            ),
        ] = None,
    ) -> CallToolResult:
        """Bind a secret to a computer. Commands run in it afterwards get a placeholder in `env`;
        its HTTPS requests to the secret's hosts leave with the real value, which it never sees.
        """
        async with clients(ctx) as sanbox:
            binding = await sanbox.secrets.bind(name, computer, env=env)
        return result(describe_binding(binding), {"binding": binding.to_json()})

    @tool("unbind_secret", _hints(read_only=False, destructive=True))
    async def unbind_secret(
        computer: Ref, name: SecretName, ctx: Context[Any, Any]
    ) -> CallToolResult:
        """Unbind a secret from a computer: its requests no longer carry the value."""
        async with clients(ctx) as sanbox:
            binding = await sanbox.secrets.unbind(name, computer)
        text = f"unbound {binding.secret} from {binding.computer}"
        return result(text, {"binding": binding.to_json()})
