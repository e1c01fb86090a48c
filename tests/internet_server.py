"""The test "internet", run inside its own network namespace by tests/internet.py: a DNS server
for the test zone, and HTTP/HTTPS servers for allowed.test and blocked.test (certificates from a
test CA). Usage: python internet_server.py CONFIG.json. Nothing here leaves the machine."""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import ssl
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).parents[1] / "src"))

from sanbox.host.egress import dnsmsg  # noqa: E402

if TYPE_CHECKING:  # mypy reads tests/ as the package it is
    from tests.model_stub import model_handler
    from tests.stub_http import next_request
else:  # tests/, beside this script
    from model_stub import model_handler
    from stub_http import next_request


class Dns(asyncio.DatagramProtocol):
    def __init__(self, zone: dict[str, str]) -> None:
        self.zone = zone
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        try:
            q = dnsmsg.parse_query(data)
        except dnsmsg.DnsFormatError:
            return
        ip = self.zone.get(q.name)
        if ip is None:
            reply = dnsmsg.nxdomain(q)
        elif q.qtype == dnsmsg.TYPE_A:
            reply = dnsmsg.answer_a(q, [ip], 5)
        else:
            reply = dnsmsg.empty(q)
        assert self.transport is not None
        self.transport.sendto(reply, addr)


def log_request(log: Path, name: str, head: bytes) -> None:
    """One line per request head this server reads: `SERVER HOST METHOD PATH`."""
    lines = head.decode("latin-1").split("\r\n")
    host = next(
        (v.strip() for k, _, v in (h.partition(":") for h in lines[1:]) if k.lower() == "host"), "-"
    )
    method, path = (lines[0].split(" ") + ["", ""])[:2]
    with log.open("a") as f:
        f.write(f"{name} {host} {method} {path}\n")
    with log.with_name("heads.log").open("a") as f:  # whole heads, for what a request carried
        f.write(json.dumps({"server": name, "path": path, "head": head.decode("latin-1")}) + "\n")


def http_handler(name: str, log: Path) -> Any:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            log_request(log, name, head)
            path = head.split(b" ")[1].decode()
            while path.startswith("/keep") and b"connection: close" not in head.lower():
                body = f"kept by {name}\n".encode()  # keep-alive: the next request on it is read
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
                head = await reader.readuntil(b"\r\n\r\n")
                log_request(log, name, head)
                path = head.split(b" ")[1].decode()
            if path.startswith("/big"):  # 64 MiB, for throughput
                chunk = b"x" * (1 << 20)
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                    % (64 << 20)
                )
                for _ in range(64):
                    writer.write(chunk)
                    await writer.drain()
                writer.close()
                return
            if path.startswith("/slow"):  # a long download, one line a second
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n")
                for i in range(600):
                    writer.write(f"{name} {i}\n".encode())
                    await writer.drain()
                    await asyncio.sleep(0.5)
            body = f"hello from {name}\n".encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()

    return handle


def echo_handler(log: Path) -> Any:
    """echo.test: each request (kept-alive connections too) logged whole on this host; the answer
    names the headers and a digest of each value, so the value itself never reaches a guest."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while (request := await next_request(reader, log)) is not None:
                path, close = request.path, request.closes
                extra = b""
                if path.startswith("/big"):  # 64 MiB, for throughput
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (64 << 20))
                    chunk = b"x" * (1 << 20)
                    for _ in range(64):
                        writer.write(chunk)
                        await writer.drain()
                    if close:
                        return
                    continue
                if path.startswith("/redirect?to="):
                    status = b"302 Found"
                    extra = b"Location: " + path.split("=", 1)[1].encode() + b"\r\n"
                    body = b"redirected\n"
                elif path.startswith("/simple"):
                    status, body = b"404 Not Found", b"no such package\n"
                else:
                    status = b"200 OK"
                    body = "".join(
                        f"{k}: sha256={hashlib.sha256(v.encode()).hexdigest()[:16]}\n"
                        for k, v in request.headers
                    ).encode()
                ending = b"Connection: close\r\n" if close else b""
                writer.write(
                    b"HTTP/1.1 "
                    + status
                    + b"\r\nContent-Type: text/plain\r\n"
                    + extra
                    + b"Content-Length: %d\r\n" % len(body)
                    + ending
                    + b"\r\n"
                    + body
                )
                await writer.drain()
                if close:
                    return
        except (OSError, asyncio.IncompleteReadError, ssl.SSLError, ValueError):
            pass
        finally:
            writer.close()

    return handle


async def main(config: dict[str, Any]) -> None:
    loop = asyncio.get_running_loop()
    await loop.create_datagram_endpoint(lambda: Dns(config["zone"]), local_addr=(config["dns"], 53))
    servers = []
    log = Path(config["requests_log"])
    for name, ip in config["hosts"].items():
        servers.append(await asyncio.start_server(http_handler(name, log), ip, 80))
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(config["cert"], config["key"])
        servers.append(await asyncio.start_server(http_handler(name, log), ip, 443, ssl=ctx))
        echo = await asyncio.start_server(http_handler(name, log), ip, 7777)
        servers.append(echo)
    echo = config["echo"]
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(config["cert"], config["key"])
    servers.append(
        await asyncio.start_server(echo_handler(Path(echo["log"])), echo["ip"], 443, ssl=ctx)
    )
    servers.append(await asyncio.start_server(echo_handler(Path(echo["log"])), echo["ip"], 80))
    bad = config["untrusted"]
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(bad["cert"], bad["key"])
    servers.append(
        await asyncio.start_server(echo_handler(Path(echo["log"])), bad["ip"], 443, ssl=ctx)
    )
    model = config["model"]
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(config["cert"], config["key"])
    servers.append(
        await asyncio.start_server(
            model_handler(Path(model["log"]), model["reply"]), model["ip"], 443, ssl=ctx
        )
    )
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind((next(iter(config["hosts"].values())), 5005))
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(json.loads(Path(sys.argv[1]).read_text())))
