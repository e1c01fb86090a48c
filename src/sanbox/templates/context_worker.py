"""A build context read in a worker process with a memory and time bound, never on the server's
event loop (the loop that serves every tenant's API, DNS filter and egress proxies).

    ctx = await unpack_bounded(data)        # Context, or ContextError / SpecError

The server starts `python -m sanbox.templates.context_worker`, writes the upload to its stdin
and reads the result from its stdout. The worker limits its own address space
(`RLIMIT_AS`) and CPU time before it reads a byte, runs `context.unpack` and answers in a small
framed format (no pickle: the parent trusts nothing the worker says beyond lengths and bytes).
The parent kills it past `TIMEOUT`; at most `PARALLEL` workers run at once."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import struct
import sys
from pathlib import Path

from .context import MAX_BYTES, MAX_FILES, MAX_TAR_BYTES, Context, ContextError, unpack
from .spec import SpecError, parse

MEMORY_LIMIT = 768 * 1024 * 1024  # bytes of address space a worker may map
CPU_SECONDS = 20  # of CPU time, then the kernel stops it
TIMEOUT = 30.0  # seconds of wall-clock time, then the server kills it
PARALLEL = 2  # workers at once on a host: more uploads wait for one
_SLOTS = asyncio.Semaphore(PARALLEL)
_OK, _ERR = b"OK\n", b"ER\n"


def encode(ctx: Context) -> bytes:
    """The context as the worker answers it: the spec text and each file, length-prefixed."""
    spec = ctx.spec_text.encode()
    parts = [_OK, struct.pack(">II", len(spec), len(ctx.files)), spec]
    for name, data in sorted(ctx.files.items()):
        raw = name.encode()
        parts += [struct.pack(">HQ", len(raw), len(data)), raw, data]
    return b"".join(parts)


def decode(out: bytes, where: str) -> Context:
    """The worker's answer back into a Context (or the error it reported); lengths are checked
    against the context's own limits."""
    if out.startswith(_ERR):
        error = json.loads(out[len(_ERR) :])
        if error.get("kind") == "spec":
            raise SpecError(where, int(error["line"]), str(error["reason"]))
        raise ContextError(str(error["message"]))
    if not out.startswith(_OK):
        raise ContextError("the context could not be read within the server's bounds")
    at = len(_OK)
    spec_len, count = struct.unpack_from(">II", out, at)
    at += 8
    if count > MAX_FILES or spec_len > MAX_BYTES:
        raise ContextError("the context could not be read within the server's bounds")
    spec_text = out[at : at + spec_len].decode()
    at += spec_len
    files: dict[str, bytes] = {}
    for _ in range(count):
        name_len, size = struct.unpack_from(">HQ", out, at)
        at += 10
        name = out[at : at + name_len].decode()
        at += name_len
        if size > MAX_BYTES or at + size > len(out):
            raise ContextError("the context could not be read within the server's bounds")
        files[name] = out[at : at + size]
        at += size
    return Context(spec_text, parse(spec_text, where), files)


def _limit_self() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))
    resource.setrlimit(resource.RLIMIT_NOFILE, (16, 16))


def main() -> int:
    _limit_self()
    data = sys.stdin.buffer.read(MAX_TAR_BYTES + 1)
    where = sys.argv[1] if len(sys.argv) > 1 else "sanbox.toml"
    try:
        if len(data) > MAX_TAR_BYTES:
            raise ContextError(f"the context is over {MAX_TAR_BYTES >> 20} MiB")
        out = encode(unpack(data, where))
    except SpecError as exc:
        out = _ERR + json.dumps({"kind": "spec", "line": exc.line, "reason": exc.reason}).encode()
    except ContextError as exc:
        out = _ERR + json.dumps({"kind": "context", "message": str(exc)}).encode()
    except MemoryError:
        out = _ERR + json.dumps({"kind": "context", "message": _TOO_MUCH}).encode()
    sys.stdout.buffer.write(out)
    sys.stdout.buffer.flush()
    return 0


_TOO_MUCH = "the context could not be read within the server's bounds (memory or time)"


def _argv(where: str) -> list[str]:
    # -S: no site hooks (.pth files); the paths it needs come in PYTHONPATH
    return [sys.executable, "-S", "-m", "sanbox.templates.context_worker", where]


def _env() -> dict[str, str]:
    """Where the worker finds this very sanbox (and the libraries it imports), nothing else."""
    here = str(Path(__file__).resolve().parents[2])
    paths = [here, *(p for p in sys.path if p and Path(p).is_dir())]
    return {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)), "LC_ALL": "C.UTF-8"}


async def unpack_bounded(data: bytes, where: str = "sanbox.toml") -> Context:
    """`context.unpack(data)` in a bounded worker process; ContextError past its bounds."""
    async with _SLOTS:
        proc = await asyncio.create_subprocess_exec(
            *_argv(where),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env=_env(),
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(data), TIMEOUT)
        except TimeoutError:
            raise ContextError(_TOO_MUCH) from None
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    if proc.returncode != 0:
        raise ContextError(_TOO_MUCH)
    return await asyncio.to_thread(decode, out, where)


if __name__ == "__main__":
    sys.exit(main())
