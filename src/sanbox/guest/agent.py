"""Entry point of the guest agent.

Usage: ``python3 -m sanbox_guest.agent [--port-name NAME | --unix PATH | --vsock PORT]``.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from dataclasses import dataclass

from . import link
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
    if args.unix:
        await link.serve_socket(session, link.unix_socket(args.unix))
    elif args.vsock is not None:
        await link.serve_socket(session, link.vsock_socket(args.vsock))
    else:
        await link.serve_port(session, args.port_name, args.port_path)


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
