"""Entry point of the guest agent.

Usage: ``python3 -m sanbox_guest.agent [--port-name NAME | --unix PATH | --vsock PORT]``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from . import link
from .protocol import AGENT_VERSION
from .session import Session

log = logging.getLogger("sanbox.agent")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="sanbox-agent", description=__doc__)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--port-name", default="org.sanbox.agent", help="virtio-serial port name")
    where.add_argument("--unix", metavar="PATH", help="listen on a Unix socket (tests)")
    where.add_argument("--vsock", metavar="PORT", type=int, help="listen on AF_VSOCK")
    where.add_argument("--port-path", metavar="DEV", help="serve this character device")
    parser.add_argument("--verbose", "-v", action="store_true")
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace) -> None:
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
