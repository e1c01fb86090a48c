"""What a tool answers: a few lines of text for the model and the record as structured content, or
the API's error (`is_error`, with its code and message). Pure functions of SDK values."""

from __future__ import annotations

import base64
from typing import Any

from mcp.types import CallToolResult, TextContent

from ..sdk import ComputerRecord, ExecResult, FileEntry, PublishedPort, SanboxError, Snapshot

OUTPUT_CAP = 64 * 1024
"""Bytes of stdout and of stderr an `exec` result keeps (each)."""
FILE_CAP = 1024 * 1024
"""Bytes `read_file` returns and `write_file` takes; bigger files go through `sanbox cp`."""
LIST_CAP = 1000
"""Directory entries `list_files` returns."""


def result(text: str, structured: dict[str, Any]) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured
    )


def error_result(exc: SanboxError) -> CallToolResult:
    """The API's error as the tool's error: `error (code): message`, and the code structured."""
    error = {"code": exc.code, "message": exc.message}
    return CallToolResult(
        content=[TextContent(type="text", text=f"error ({exc.code}): {exc.message}")],
        structured_content={"error": error},
        is_error=True,
    )


def capped(text: str, limit: int) -> tuple[str, bool]:
    """`text` cut to at most `limit` UTF-8 bytes (never inside a character), and whether it was."""
    data = text.encode()
    if len(data) <= limit:
        return text, False
    return data[:limit].decode("utf-8", "ignore"), True


def describe(c: ComputerRecord) -> str:
    """`work (cmp_1) running: base, 1 vCPU, 512 MiB`, with the memory outcome of a resume."""
    vcpus = f"{c.vcpus} vCPU" + ("s" if c.vcpus != 1 else "")
    disk = f", {c.disk_gib} GiB disk" if c.disk_gib else ""
    line = f"{c.name} ({c.id}) {c.state}: {c.template}, {vcpus}, {c.memory_mib} MiB{disk}"
    if c.memory:
        line += f"; memory {c.memory}" + (f" ({c.memory_reason})" if c.memory_reason else "")
    if c.last_error:
        line += f"; last error: {c.last_error}"
    return line


def computer_result(c: ComputerRecord) -> CallToolResult:
    return result(describe(c), {"computer": c.to_json()})


def computers_result(records: list[ComputerRecord]) -> CallToolResult:
    lines = [describe(c) for c in records] or ["no computers"]
    return result("\n".join(lines), {"computers": [c.to_json() for c in records]})


def exec_result(computer: str, r: ExecResult, cap: int = OUTPUT_CAP) -> CallToolResult:
    """Exit status, then stdout and stderr, each kept to its first `cap` bytes (said when cut)."""
    stdout, cut_out = capped(r.stdout, cap)
    stderr, cut_err = capped(r.stderr, cap)
    cut_out, cut_err = cut_out or r.stdout_truncated, cut_err or r.stderr_truncated
    if r.timed_out:
        status = f"timed out (exit code {r.exit_code})"
    elif r.signal is not None:
        status = f"killed by signal {r.signal}"
    else:
        status = f"exit code {r.exit_code}"
    parts = [status]
    for name, text, cut in (("stdout", stdout, cut_out), ("stderr", stderr, cut_err)):
        if text:
            parts.append(f"--- {name} ---\n{text.rstrip(chr(10))}")
        if cut:
            parts.append(f"[{name} truncated: only its first {cap} bytes are shown]")
    structured = {
        "computer": computer,
        "exit_code": r.exit_code,
        "signal": r.signal,
        "timed_out": r.timed_out,
        "stdout": stdout,
        "stderr": stderr,
        "stdout_truncated": cut_out,
        "stderr_truncated": cut_err,
    }
    return result("\n".join(parts), structured)


def file_result(path: str, data: bytes) -> CallToolResult:
    """A file's content: as text when it is UTF-8, else base64 (`encoding` says which)."""
    try:
        content, encoding = data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        content, encoding = base64.b64encode(data).decode("ascii"), "base64"
    head = f"{path}: {len(data)} bytes" + (", binary, base64:" if encoding == "base64" else ":")
    structured = {"path": path, "size": len(data), "encoding": encoding, "content": content}
    return result(f"{head}\n{content}", structured)


def decoded(content: str, encoding: str) -> bytes:
    """The bytes `write_file` was given: text as UTF-8, or base64 (ValueError if it is not)."""
    if encoding == "base64":
        return base64.b64decode(content, validate=True)
    return content.encode()


def entries_result(path: str, entries: list[FileEntry], cap: int = LIST_CAP) -> CallToolResult:
    shown = entries[:cap]
    lines = [f"{e.type:<7} {e.size:>10} {e.name}" for e in shown]
    if len(entries) > cap:
        lines.append(f"[{len(entries) - cap} more entries not shown: only the first {cap}]")
    structured = {
        "path": path,
        "entries": [
            {"name": e.name, "path": e.path, "type": e.type, "size": e.size} for e in shown
        ],
        "truncated": len(entries) > cap,
    }
    return result("\n".join(lines) or f"{path} is empty", structured)


def port_result(computer: str, p: PublishedPort) -> CallToolResult:
    access = "public: no key needed" if p.public else "private: needs an API key of the org"
    text = f"port {p.port} of {computer} is at {p.url} ({access})"
    return result(text, {"computer": computer, "port": p.port, "public": p.public, "url": p.url})


def describe_snapshot(snap: Snapshot) -> str:
    """`kept (snp_1) of work: base, with memory, 212 MiB of its own`."""
    label = f"{snap.name} ({snap.id})" if snap.name else snap.id
    kind = "with memory and processes" if snap.memory else "disk only"
    of = snap.computer_name or snap.computer_id
    return f"{label} of {of}: {snap.template}, {kind}, {snap.size_bytes // 2**20} MiB of its own"


def snapshot_result(snap: Snapshot) -> CallToolResult:
    return result(describe_snapshot(snap), {"snapshot": snap.to_json()})


def snapshots_result(snaps: list[Snapshot]) -> CallToolResult:
    lines = [describe_snapshot(s) for s in snaps] or ["no snapshots"]
    return result("\n".join(lines), {"snapshots": [s.to_json() for s in snaps]})
