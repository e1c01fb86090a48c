"""Entry point of the guest agent.

Usage: ``python3 -m sanbox_guest.agent [--port-name NAME | --unix PATH | --vsock PORT]``.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from dataclasses import dataclass

from . import control, link
from .protocol import AGENT_VERSION
from .session import Session

log = logging.getLogger("sanbox.agent")


@dataclass
class Options:
    port_name: str = "org.sanbox.agent"
    unix: str | None = None
    vsock: int | None = None
    port_path: str | None = None
    verbose: bool = False


USAGE = "usage: sanbox-agent [--port-name N | --unix PATH | --vsock PORT | --port-path DEV] [-v]"


def parse_args(argv: list[str] | None = None) -> Options:
    """A hand-written parser: argparse alone costs a quarter second at boot under emulation."""
    args = list(sys.argv[1:] if argv is None else argv)
    opts = Options()
    places = 0
    while args:
        flag = args.pop(0)
        if flag in ("-v", "--verbose"):
            opts.verbose = True
            continue
        if flag in ("-h", "--help"):
            print(USAGE)
            raise SystemExit(0)
        if flag not in ("--port-name", "--unix", "--vsock", "--port-path") or not args:
            raise SystemExit(USAGE)
        value = args.pop(0)
        places += 1
        if flag == "--vsock":
            if not value.isdigit():
                raise SystemExit("--vsock takes a port number")
            opts.vsock = int(value)
        else:
            setattr(opts, flag[2:].replace("-", "_"), value)
    if places > 1:
        raise SystemExit("give one of --port-name, --unix, --vsock, --port-path")
    return opts


async def serve(args: Options) -> None:
    session = Session()
    warming = asyncio.ensure_future(warm())
    try:
        if args.unix:
            await link.serve_socket(session, link.unix_socket(args.unix))
        elif args.vsock is not None:
            await link.serve_socket(session, link.vsock_socket(args.vsock))
        else:
            await link.serve_port(session, args.port_name, args.port_path)
    finally:
        warming.cancel()


async def warm() -> None:
    """What a copied computer's first requests would otherwise make for the first time, made
    once at start, so every copy of this memory (a fork, a restore, a pool member) has it: the
    default executor's worker thread (identity's and SSH's file work) and the C library (the
    clock). A fork's first `new_identity` took 0.21-0.28 s under TCG without it, 0.10-0.13 s
    with (the rest is the new VM running that code for the first time)."""
    try:
        await asyncio.get_running_loop().run_in_executor(None, control.libc)
    except OSError as exc:  # no C library to load: the clock call will say so when asked
        log.warning("warming up: %s", exc)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="sanbox-agent %(levelname)s %(message)s",
    )
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    log.info("agent %s starting", AGENT_VERSION)
    while True:
        try:
            asyncio.run(serve(args))
        except KeyboardInterrupt:
            return
        except Exception:
            log.exception("agent loop crashed; restarting")
        else:
            return


if __name__ == "__main__":
    main()
