"""`AsyncComputer`: a handle on one computer, with its record's fields as attributes."""

from __future__ import annotations

import base64
import builtins
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from ._http import HttpCore
from .exec_protocol import ExecStart
from .exec_stream import AsyncExecStream
from .local_file import WholeFile
from .paths import segment
from .ssh_stream import AsyncSshStream
from .types import (
    ComputerRecord,
    Event,
    ExecResult,
    FileEntry,
    PublishedPort,
    Snapshot,
    SshAccess,
    ViewLink,
)
from .usage import Metrics

if TYPE_CHECKING:
    from .client import AsyncSanbox

CHUNK = 1 << 20
Progress = Callable[[int, int | None], None]
"""Called with (bytes done, total bytes or None) as a transfer advances."""


class ComputerFields:
    """The record's fields as read-only attributes; shared by the async and sync handles."""

    @property
    def record(self) -> ComputerRecord:
        raise NotImplementedError

    id = property(lambda self: self.record.id)
    name = property(lambda self: self.record.name)
    state = property(lambda self: self.record.state)
    org = property(lambda self: self.record.org)
    template = property(lambda self: self.record.template)
    vcpus = property(lambda self: self.record.vcpus)
    memory_mib = property(lambda self: self.record.memory_mib)
    disk_gib = property(lambda self: self.record.disk_gib)
    env = property(lambda self: self.record.env)
    labels = property(lambda self: self.record.labels)
    hypervisor = property(lambda self: self.record.hypervisor)
    isolation = property(lambda self: self.record.isolation)
    created_at = property(lambda self: self.record.created_at)
    updated_at = property(lambda self: self.record.updated_at)
    last_error = property(lambda self: self.record.last_error)
    unknown_reason = property(lambda self: self.record.unknown_reason)
    region = property(lambda self: self.record.region)
    idle_timeout = property(lambda self: self.record.idle_timeout)
    memory = property(lambda self: self.record.memory)
    memory_reason = property(lambda self: self.record.memory_reason)
    origin = property(lambda self: self.record.origin)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.record.name} {self.record.id} {self.record.state}>"


class AsyncComputer(ComputerFields):
    def __init__(self, client: AsyncSanbox, record: ComputerRecord) -> None:
        self._client = client
        self._record = record
        self.files = AsyncFiles(self)

    @property
    def record(self) -> ComputerRecord:
        return self._record

    @property
    def path(self) -> str:
        return f"/v1/computers/{segment(self._record.id)}"

    async def _update(self, method: str, suffix: str = "") -> AsyncComputer:
        data = await self._client.http.json(method, self.path + suffix, timeout=_LONG)
        self._record = ComputerRecord.from_json(data)
        return self

    async def refresh(self) -> AsyncComputer:
        return await self._update("GET")

    async def start(self) -> AsyncComputer:
        return await self._update("POST", "/start")

    async def stop(self) -> AsyncComputer:
        return await self._update("POST", "/stop")

    async def move(
        self, host: str | None = None, idempotency_key: str | None = None
    ) -> AsyncComputer:
        """Move this stopped computer to another fleet host of its region (`host`, or the best
        one), its disk copied and verified (host-admin key). It stays stopped. Sent again with
        the same `idempotency_key`, it answers where that move left it (no move again)."""
        path = f"/v1/fleet/computers/{segment(self.id)}/move"
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        data = await self._client.http.json(
            "POST", path, json_body={"host": host}, headers=headers, timeout=_LONG
        )
        self._record = ComputerRecord.from_json(data)
        return self

    async def pause(self) -> AsyncComputer:
        """Save memory and processes and end the VM process (no CPU, no memory on the host)."""
        return await self._update("POST", "/pause")

    async def resume(self) -> AsyncComputer:
        """Restore a paused or suspended computer; `memory` says whether memory was restored."""
        return await self._update("POST", "/resume")

    async def update(
        self,
        idle_timeout: int | None = None,
        lifetime: int | None = None,
        on_lifetime: str | None = None,
        max_running: int | None = None,
    ) -> AsyncComputer:
        """Change its idle timeout or session limits (None: left as it is; 0: none).
        `lifetime` counts from its creation, `max_running` from its last start."""
        body = {
            "idle_timeout": idle_timeout,
            "lifetime": lifetime,
            "on_lifetime": on_lifetime,
            "max_running": max_running,
        }
        body = {k: v for k, v in body.items() if v is not None}
        data = await self._client.http.json("PATCH", self.path, json_body=body, timeout=_LONG)
        self._record = ComputerRecord.from_json(data)
        return self

    async def restart(self) -> AsyncComputer:
        return await self._update("POST", "/restart")

    async def delete(self) -> AsyncComputer:
        return await self._update("DELETE")

    async def snapshot(self, memory: bool = False, name: str | None = None) -> Snapshot:
        """Keep this computer's disk (taken consistently), and with `memory=True` its RAM and
        processes too, as a snapshot of the org that outlives the computer. Returns once it is
        durable and verified; `client.computers.create(from_snapshot=...)` makes computers of it."""
        data = await self._client.http.json(
            "POST",
            self.path + "/snapshots",
            json_body={"memory": memory, "name": name},
            timeout=_LONG,
        )
        return Snapshot.from_json(data)

    async def fork(
        self, count: int = 1, name: str | None = None, region: str | None = None
    ) -> builtins.list[AsyncComputer]:
        """`count` new running computers (1-16) that start where this one is now, each with its
        own identity (hostname, machine-id, SSH host keys, entropy); all or none. `name` names a
        single fork, or is the prefix of several (`name-1`...`name-N`). Forks run in their
        source's region (`region`, if given, must be it: else `region_mismatch`)."""
        body: dict[str, Any] = {"count": count, "name": name}
        if region is not None:
            body["region"] = region
        data = await self._client.http.json(
            "POST", self.path + "/fork", json_body=body, timeout=_LONG
        )
        return [
            AsyncComputer(self._client, ComputerRecord.from_json(c))
            for c in data.get("computers", [])
        ]

    async def exec(
        self,
        cmd: str | list[str],
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
        stdin: str | bytes | bytearray | memoryview | None = None,
        timeout: float | None = None,
        max_output_bytes: int | None = None,
    ) -> ExecResult:
        """Run `cmd` to completion (a list is argv, a string runs in the shell). `stdin` is
        its input: text, or any bytes (sent base64-encoded, so input that is not UTF-8 arrives
        as it is). Each output stream keeps its first `max_output_bytes` (at most, and by
        default, the server's limit: 10 MiB unless configured); `stdout_truncated`/
        `stderr_truncated` say when more came."""
        body: dict[str, Any] = {
            "cmd": cmd,
            "env": env or {},
            "cwd": cwd,
            "user": user,
            "stdin": stdin if isinstance(stdin, str) else None,
            "timeout": timeout,
            "max_output_bytes": max_output_bytes,
        }
        if stdin is not None and not isinstance(stdin, str):  # bytes (or bytearray, memoryview)
            # the field only then: a server from before it refuses one it does not know
            body["stdin_base64"] = base64.b64encode(stdin).decode("ascii")
        http = self._client.http
        # the answer comes when the command ends: with no timeout, as long as it runs
        wait = httpx.Timeout(http.timeout, read=None) if timeout is None else timeout + http.timeout
        data = await http.json("POST", self.path + "/exec", json_body=body, timeout=wait)
        return ExecResult.from_json(data)

    def exec_stream(
        self,
        cmd: str | list[str] | None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
        pty: bool = False,
        rows: int = 24,
        cols: int = 80,
        timeout: float | None = None,
    ) -> AsyncExecStream:
        """Stream a command over a WebSocket; `cmd=None` with `pty=True` is a login shell.
        `timeout` (seconds, not with a PTY) kills the command: its exit code is then 124."""
        request = ExecStart(cmd, env or {}, cwd, user, timeout, pty, rows, cols)
        return self._client.open_websocket(self.path + "/exec/stream", request)

    async def authorize_ssh_key(self, public_key: str) -> SshAccess:
        """Let an OpenSSH public key line log in as root over SSH; the answer has the computer's
        host key (for known_hosts). `sanbox ssh-config` does this with the CLI's own key."""
        data = await self._client.http.json(
            "POST", self.path + "/ssh-keys", json_body={"public_key": public_key}, timeout=_LONG
        )
        return SshAccess.from_json(data)

    def ssh_stream(self) -> AsyncSshStream:
        """One SSH connection to a fresh sshd in the guest, as bytes (see `AsyncSshStream`)."""
        return AsyncSshStream(*self._client.websocket_target(self.path + "/ssh"))

    async def events(self) -> list[Event]:
        data = await self._client.http.json("GET", self.path + "/events")
        return [Event.from_json(e) for e in data.get("events", [])]

    async def metrics(self) -> Metrics:
        """CPU %, memory and disk the guest reported every few seconds while running."""
        return Metrics.from_json(await self._client.http.json("GET", self.path + "/metrics"))

    async def console(self, lines: int = 100) -> list[str]:
        data = await self._client.http.json("GET", self.path + "/console", params={"lines": lines})
        return [str(line) for line in data.get("lines", [])]

    async def allowlist(self) -> list[str]:
        """The hosts, wildcards and cidr:port rules the computer may reach (empty: nothing)."""
        data = await self._client.http.json("GET", self.path + "/network")
        return [str(r) for r in data.get("allow", [])]

    async def set_allowlist(self, allow: list[str]) -> int:
        """Replace the allowlist (applied at once); returns how many open flows it closed."""
        data = await self._client.http.json(
            "PUT", self.path + "/network", json_body={"allow": list(allow)}
        )
        return int(data.get("closed_flows", 0))

    async def ports(self) -> list[PublishedPort]:
        data = await self._client.http.json("GET", self.path + "/ports")
        return [PublishedPort.from_json(p) for p in data.get("ports", [])]

    async def publish(self, port: int, public: bool = False) -> PublishedPort:
        """Publish a guest port as a private URL (public=True: no API key needed)."""
        data = await self._client.http.json(
            "POST", self.path + "/ports", json_body={"port": port, "public": public}
        )
        return PublishedPort.from_json(data)

    async def unpublish(self, port: int) -> None:
        await self._client.http.request("DELETE", f"{self.path}/ports/{port}")

    async def view_link(self, port: int, expires_in: int | None = None) -> ViewLink:
        """A URL that opens the private `port` view-only, for whoever holds it, for `expires_in`
        seconds (the server's default: an hour). It carries no API key."""
        body = {} if expires_in is None else {"expires_in": expires_in}
        data = await self._client.http.json(
            "POST", f"{self.path}/ports/{port}/view-link", json_body=body
        )
        return ViewLink.from_json(data)


class AsyncFiles:
    """Files in the computer's guest, addressed by absolute paths."""

    def __init__(self, computer: AsyncComputer) -> None:
        self._computer = computer

    @property
    def _http(self) -> HttpCore:
        return self._computer._client.http

    @property
    def _base(self) -> str:
        return self._computer.path + "/files"

    async def read(self, path: str, max_bytes: int | None = None) -> bytes:
        """The file's bytes; with `max_bytes`, its first ones, that many at most (`head -c`),
        however big the file is by then."""
        params = {"path": path, "max_bytes": max_bytes}
        response = await self._http.request("GET", self._base, params=params, timeout=_LONG)
        content: bytes = response.content
        return content

    async def write(
        self, path: str, data: bytes | str | os.PathLike[str], mode: str | int | None = None
    ) -> int:
        """Write bytes, text (utf-8) or a local file (a Path) to `path`; return the size."""
        if isinstance(data, os.PathLike):
            return await self.upload(data, path, mode=mode)
        raw = data.encode() if isinstance(data, str) else data
        return await self._put(path, raw, mode)

    async def upload(
        self,
        local: str | os.PathLike[str],
        path: str,
        mode: str | int | None = None,
        progress: Progress | None = None,
    ) -> int:
        """Stream a local file into the guest."""
        source = Path(local)
        total = source.stat().st_size

        async def chunks() -> AsyncIterator[bytes]:
            done = 0
            with source.open("rb") as file:
                while chunk := file.read(CHUNK):
                    done += len(chunk)
                    yield chunk
                    if progress is not None:
                        progress(done, total)

        return await self._put(path, chunks(), mode)

    async def _put(self, path: str, content: bytes | AsyncIterator[bytes], mode: Any) -> int:
        mode_text = format(mode, "04o") if isinstance(mode, int) else mode
        data = await self._http.json(
            "PUT",
            self._base,
            params={"path": path, "mode": mode_text},
            content=content,
            headers={"Content-Type": "application/octet-stream"},
            timeout=_LONG,
        )
        return int(data.get("size", 0)) if isinstance(data, dict) else 0

    async def download(
        self, path: str, local: str | os.PathLike[str], progress: Progress | None = None
    ) -> int:
        """Stream a guest file into a local file; return the bytes written. The local file is
        replaced only once the whole file is in: a download cut midway leaves it as it was."""
        async with self._http.stream("GET", self._base, params={"path": path}, timeout=_LONG) as r:
            length = r.headers.get("content-length")
            total = int(length) if length and length.isdigit() else None
            with WholeFile(local) as file:
                async for chunk in r.aiter_bytes(CHUNK):
                    file.write(chunk)
                    if progress is not None:
                        progress(file.size, total)
        return file.size

    async def list(self, path: str = "/") -> builtins.list[FileEntry]:
        data = await self._http.json("GET", self._base + "/list", params={"path": path})
        return [FileEntry.from_json(e) for e in data.get("entries", [])]

    async def stat(self, path: str) -> FileEntry:
        return FileEntry.from_json(
            await self._http.json("GET", self._base + "/stat", params={"path": path})
        )

    async def remove(self, path: str, recursive: bool = False) -> None:
        await self._http.request(
            "DELETE", self._base, params={"path": path, "recursive": recursive}
        )

    async def mkdir(self, path: str) -> None:
        await self._http.request("POST", self._base + "/mkdir", json_body={"path": path})


_LONG = 600.0
"""Seconds to allow for lifecycle calls and transfers, which take longer than a lookup."""
