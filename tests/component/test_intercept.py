"""The secret proxy over real loopback TLS: a guest trusting the org's CA (B) talks to the proxy,
which verifies the upstream's certificate (CA A) and adds the secret. Proven here: the header is
injected and overwrites the guest's own, every request of a kept-alive connection gets the secrets
bound at that moment, a Host other than the SNI is refused (421) before anything goes upstream, a
redirect comes back as is, an upstream that closed is dialled again, an untrusted upstream gets
nothing (502), an HTTP/2 preface is refused with a clear word, a chunked body streams through,
and the value shows in no refusal or log. And the value never comes back: a response that echoes
it (in its head, its body, Basic-encoded, or after a 101) is not relayed, a compressed one is
refused, TRACE is refused, the upstream is asked for identity bodies; a normal response passes
byte for byte."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import gzip
import http.client
import logging
import socket
import ssl
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import h11
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from sanbox.host.egress.injection import Injection
from sanbox.host.egress.intercept import RefusedError, intercept
from sanbox.host.egress.interception import Handover
from sanbox.host.egress.leak_scan import LEAK_REASON
from sanbox.host.egress.sniff import INCOMPLETE, tls_server_name

pytestmark = pytest.mark.component

NAME = "echo.test"
VALUE = b"sk-live-SECRET-0123456789"
SECRET = Injection((NAME,), b"Authorization", b"Bearer {value}", b"sbx_ph_3f9a0001", VALUE)


class Ca:
    """A test certificate authority (ECDSA P-256) that signs leaves for host names."""

    def __init__(self, label: str) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"Test CA {label}")])
        self.cert = (
            self._builder(subject, self.key.public_key())
            .issuer_name(subject)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_ca_usage(), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.pem = self.cert.public_bytes(serialization.Encoding.PEM).decode()

    @staticmethod
    def _builder(subject: x509.Name, key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
        now = datetime.datetime.now(datetime.UTC)
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .public_key(key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
        )

    def server_context(self, host: str, folder: Path) -> ssl.SSLContext:
        """A TLS server context with a leaf for `host` signed by this CA, ALPN http/1.1 only."""
        key = ec.generate_private_key(ec.SECP256R1())
        leaf = (
            self._builder(
                x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]), key.public_key()
            )
            .issuer_name(self.cert.subject)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        cert_file, key_file = folder / f"{id(leaf)}.crt", folder / f"{id(leaf)}.key"
        cert_file.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert_file, key_file)
        ctx.set_alpn_protocols(["http/1.1"])
        return ctx

    def client_context(self, alpn: str = "http/1.1") -> ssl.SSLContext:
        ctx = ssl.create_default_context(cadata=self.pem)
        ctx.set_alpn_protocols([alpn])
        return ctx


def _ca_usage() -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        key_cert_sign=True,
        crl_sign=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        encipher_only=False,
        decipher_only=False,
    )


@dataclass
class FakeInterception:
    server: ssl.SSLContext
    upstream_context: ssl.SSLContext
    secrets: list[Injection] = field(default_factory=lambda: [SECRET])
    strict_placeholders: bool = False

    def applies(self, name: str) -> bool:
        return name == NAME

    async def server_context(self, name: str) -> ssl.SSLContext:
        return self.server

    def injections(self) -> list[Injection]:
        return list(self.secrets)

    def handover(self) -> Handover | None:
        return None  # for a fleet host's proxy: the proxy here never asks


@dataclass
class Lab:
    port: int  # the proxy's
    interception: FakeInterception
    seen: list[list[tuple[bytes, bytes]]] = field(default_factory=list)  # upstream's requests
    connections: int = 0  # upstream TLS connections with a request
    drop_next: bool = False  # close at the next request on the same connection, unanswered
    refused: list[RefusedError] = field(default_factory=list)
    go_on: asyncio.Event = field(default_factory=asyncio.Event)  # /late: send the rest now


async def echo(lab: Lab, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer each request with its headers and its body's size; /redirect with a 302."""
    conn, counted = h11.Connection(h11.SERVER), False
    headers: list[tuple[bytes, bytes]] = []
    size = 0
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(65536))
            elif isinstance(event, h11.Request):
                if counted and lab.drop_next:  # as a server whose keep-alive ran out just then
                    lab.drop_next = False
                    return
                lab.connections += 0 if counted else 1
                counted, size = True, 0
                headers = [(b"target", event.target), *event.headers.raw_items()]
            elif isinstance(event, h11.Data):
                size += len(event.data)
            elif isinstance(event, h11.EndOfMessage) and headers[0][1] in (b"/ws", b"/ws-leak"):
                lab.seen.append(headers)
                secret = b"".join(values(headers, b"authorization"))
                await shout(conn, reader, writer, secret if headers[0][1] == b"/ws-leak" else b"")
                return
            elif isinstance(event, h11.EndOfMessage) and headers[0][1] in LEAKS:
                lab.seen.append(headers)
                await leak(lab, conn, writer, headers)
                conn.start_next_cycle()
            elif isinstance(event, h11.EndOfMessage):
                lab.seen.append(headers)
                body = b"".join(n + b": " + _redacted(v) + b"\n" for n, v in headers)
                body += f"body: {size}\n".encode()
                status = 302 if headers[0][1] == b"/redirect" else 200
                extra = [(b"Location", b"https://elsewhere.test/")] if status == 302 else []
                if headers[0][1] == b"/close":
                    extra.append((b"Connection", b"close"))
                length = (b"Content-Length", str(len(body)).encode())
                response = h11.Response(status_code=status, headers=[length, *extra])
                for out in (response, h11.Data(data=body), h11.EndOfMessage()):
                    writer.write(conn.send(out) or b"")
                await writer.drain()
                if conn.our_state is not h11.DONE:
                    return
                conn.start_next_cycle()
            else:
                return
    except (h11.ProtocolError, ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()


def _redacted(value: bytes) -> bytes:
    """The echo tells its headers, but not a secret's value (the proxy would stop that)."""
    return value.replace(VALUE, b"<the value>")


LEAKS = {b"/leak-body", b"/leak-header", b"/leak-basic", b"/leak-late", b"/gzip"}


async def leak(
    lab: Lab, conn: h11.Connection, writer: asyncio.StreamWriter, headers: list[tuple[bytes, bytes]]
) -> None:
    """Answer with the value the request carried, as the path says where."""
    path, secret = headers[0][1], b"".join(values(headers, b"authorization"))
    body, extra = b"ok\n", []
    if path == b"/leak-body":
        body = b"you sent: " + secret + b"\n"
    elif path == b"/leak-header":
        extra = [(b"X-Echo", secret)]
    elif path == b"/leak-basic":
        extra = [(b"X-Echo", b"Basic " + base64.b64encode(b"me:" + secret))]
    elif path == b"/gzip":
        body, extra = gzip.compress(b"hello"), [(b"Content-Encoding", b"gzip")]
    if path == b"/leak-late":
        filler = b"f" * 100_000
        length = (b"Content-Length", str(len(filler) + len(secret)).encode())
        writer.write(conn.send(h11.Response(status_code=200, headers=[length])) or b"")
        writer.write(conn.send(h11.Data(data=filler)) or b"")
        await writer.drain()
        await lab.go_on.wait()  # the guest has the head and part of the body
        body = secret
    else:
        length = (b"Content-Length", str(len(body)).encode())
        writer.write(conn.send(h11.Response(status_code=200, headers=[length, *extra])) or b"")
    for out in (h11.Data(data=body), h11.EndOfMessage()):
        writer.write(conn.send(out) or b"")
    await writer.drain()


async def shout(
    conn: h11.Connection,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    secret: bytes = b"",
) -> None:
    """Switch protocols (101), then send back every byte uppercased (and `secret`, first)."""
    upgrade = [(b"Upgrade", b"websocket"), (b"Connection", b"Upgrade")]
    switched = conn.send(h11.InformationalResponse(status_code=101, headers=upgrade)) or b""
    writer.write(switched + secret)  # one write: the proxy may read them as one
    data = conn.trailing_data[0]
    while True:
        writer.write(data.upper())
        await writer.drain()
        data = await reader.read(65536)
        if not data:
            return


@contextlib.asynccontextmanager
async def lab(tmp_path: Path, upstream_ca: Ca | None = None) -> AsyncIterator[tuple[Lab, Ca]]:
    """CA A signs the upstream (unless `upstream_ca`), CA B the proxy's leaf; yields the lab and
    CA B, which the guest trusts."""
    ca_a, ca_b = Ca("A"), Ca("B")
    interception = FakeInterception(ca_b.server_context(NAME, tmp_path), ca_a.client_context())
    state = Lab(0, interception)

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head, name = b"", tls_server_name(b"")
        try:
            while name is INCOMPLETE:
                head += await reader.read(16384)
                name = tls_server_name(head)
            assert name == NAME
            await intercept(
                (reader, writer), head, name, "127.0.0.1", interception, 10.0, port=up_port
            )
        except RefusedError as exc:
            state.refused.append(exc)
        finally:
            writer.close()

    handlers: set[asyncio.Task[None]] = set()

    async def tracked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handlers.add(asyncio.current_task())  # type: ignore[arg-type]
        await (proxy if writer.get_extra_info("sslcontext") is None else serve_echo)(reader, writer)

    async def serve_echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await echo(state, reader, writer)

    up_ctx = (upstream_ca or ca_a).server_context(NAME, tmp_path)
    upstream = await asyncio.start_server(tracked, "127.0.0.1", 0, ssl=up_ctx)
    up_port = upstream.sockets[0].getsockname()[1]
    front = await asyncio.start_server(tracked, "127.0.0.1", 0)
    state.port = front.sockets[0].getsockname()[1]
    async with upstream, front:
        yield state, ca_b
        if handlers:  # the guests have closed: every connection winds down on its own
            _, stuck = await asyncio.wait(handlers, timeout=10)
            assert not stuck


@contextlib.contextmanager
def guest(port: int, ctx: ssl.SSLContext) -> Iterator[http.client.HTTPConnection]:
    """An HTTPS connection to `echo.test` through the proxy (blocking: run it in a thread)."""
    conn = http.client.HTTPConnection(NAME, timeout=10)
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        conn.sock = ctx.wrap_socket(raw, server_hostname=NAME)
        yield conn
    finally:
        conn.close()
        raw.close()


def get(conn: http.client.HTTPConnection, path: str = "/", **headers: str) -> tuple[int, bytes]:
    conn.request("GET", path, headers=headers)
    response = conn.getresponse()
    return response.status, response.read()


def raw_guest(port: int, ctx: ssl.SSLContext, send: bytes) -> bytes:
    """Send `send` over TLS to the proxy, read to the end."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    with raw, ctx.wrap_socket(raw, server_hostname=NAME) as tls:
        tls.sendall(send)
        answer = b""
        while chunk := tls.recv(65536):
            answer += chunk
        return answer


def values(headers: list[tuple[bytes, bytes]], name: bytes) -> list[bytes]:
    return [v for n, v in headers if n.lower() == name]


@pytest.fixture(autouse=True)
def no_value_in_logs(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.DEBUG)
    yield
    assert VALUE.decode() not in caplog.text


def test_the_secret_overwrites_the_guests_header(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with lab(tmp_path) as (state, ca):

            def run() -> tuple[int, bytes]:
                with guest(state.port, ca.client_context()) as conn:
                    return get(conn, Authorization="Bearer mine")

            status, body = await asyncio.to_thread(run)
            assert status == 200
            assert values(state.seen[0], b"authorization") == [b"Bearer " + VALUE]
            assert b"Bearer mine" not in body

    asyncio.run(scenario())


def test_each_request_of_a_kept_alive_connection_gets_the_secrets_bound_then(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with lab(tmp_path) as (state, ca):

            def run() -> None:
                with guest(state.port, ca.client_context()) as conn:
                    assert get(conn)[0] == 200
                    state.interception.secrets.clear()  # the secret is unbound
                    assert get(conn, "/2", Authorization="Bearer sbx_ph_3f9a0001")[0] == 200

            await asyncio.to_thread(run)
            first, second = state.seen
            assert values(first, b"authorization") == [b"Bearer " + VALUE]
            assert values(second, b"authorization") == [b"Bearer sbx_ph_3f9a0001"]
            assert state.connections == 1  # one upstream connection carried both

    asyncio.run(scenario())


def test_an_upstream_that_closed_is_dialled_again(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with lab(tmp_path) as (state, ca):

            def run() -> None:
                with guest(state.port, ca.client_context()) as conn:
                    assert get(conn, "/close")[0] == 200
                    assert get(conn, "/again")[0] == 200

            await asyncio.to_thread(run)
            assert state.connections == 2 and len(state.seen) == 2
            assert all(values(h, b"authorization") == [b"Bearer " + VALUE] for h in state.seen)
            assert all(values(h, b"connection") == [] for h in state.seen)

    asyncio.run(scenario())


def test_a_bodiless_get_whose_kept_upstream_closed_as_it_went_is_sent_once_more(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with lab(tmp_path) as (state, ca):

            def run() -> tuple[tuple[int, bytes], tuple[int, bytes]]:
                with guest(state.port, ca.client_context()) as conn:
                    assert get(conn, "/first")[0] == 200
                    state.drop_next = True
                    second = get(conn, "/second")
                    state.drop_next = True
                    conn.request("POST", "/third", body=b"side effects")
                    response = conn.getresponse()
                    return second, (response.status, response.read())

            second, third = await asyncio.to_thread(run)
            assert second[0] == 200 and b"target: /second" in second[1]
            assert state.connections == 2  # the second went on a new upstream connection
            assert third[0] == 502 and b"broken" in third[1]  # a body is never sent twice
            assert [h[0][1] for h in state.seen] == [b"/first", b"/second"]
            assert all(values(h, b"authorization") == [b"Bearer " + VALUE] for h in state.seen)
            assert VALUE not in third[1]

    asyncio.run(scenario())


def test_a_host_other_than_the_sni_is_refused_before_going_upstream(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with lab(tmp_path) as (state, ca):

            def run() -> tuple[int, bytes]:
                with guest(state.port, ca.client_context()) as conn:
                    conn.putrequest("GET", "/", skip_host=True)
                    conn.putheader("Host", "other.test")
                    conn.endheaders()
                    response = conn.getresponse()
                    return response.status, response.read()

            status, body = await asyncio.to_thread(run)
            assert status == 421 and b"other.test" in body and VALUE not in body
            assert state.seen == [] and state.refused[0].status == 421

    asyncio.run(scenario())


def test_a_redirect_comes_back_as_it_is(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with lab(tmp_path) as (state, ca):

            def run() -> http.client.HTTPResponse:
                with guest(state.port, ca.client_context()) as conn:
                    conn.request("GET", "/redirect")
                    response = conn.getresponse()
                    response.read()
                    return response

            response = await asyncio.to_thread(run)
            assert response.status == 302
            assert response.getheader("Location") == "https://elsewhere.test/"
            assert len(state.seen) == 1

    asyncio.run(scenario())


def test_an_untrusted_upstream_gets_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with lab(tmp_path, upstream_ca=Ca("C")) as (state, ca):

            def run() -> tuple[int, bytes]:
                with guest(state.port, ca.client_context()) as conn:
                    return get(conn)

            status, body = await asyncio.to_thread(run)
            assert status == 502 and b"the certificate of echo.test is not trusted" in body
            assert VALUE not in body
            assert state.seen == [] and state.refused[0].status == 502

    asyncio.run(scenario())


def test_an_http2_preface_is_refused_with_a_clear_word(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with lab(tmp_path) as (state, ca):

            def run() -> bytes:
                raw = socket.create_connection(("127.0.0.1", state.port), timeout=10)
                with ca.client_context("h2").wrap_socket(raw, server_hostname=NAME) as tls:
                    assert tls.selected_alpn_protocol() is None
                    tls.sendall(
                        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"
                    )
                    answer = b""
                    while chunk := tls.recv(65536):
                        answer += chunk
                    return answer

            answer = await asyncio.to_thread(run)
            assert b"HTTP/2 is not offered on hosts with secrets: use HTTP/1.1" in answer
            assert VALUE not in answer and state.seen == []

    asyncio.run(scenario())


def test_a_chunked_body_streams_through(tmp_path: Path) -> None:
    size = 4 << 20

    async def scenario() -> None:
        async with lab(tmp_path) as (state, ca):

            def run() -> tuple[int, bytes]:
                with guest(state.port, ca.client_context()) as conn:
                    chunks = (b"z" * 65536 for _ in range(size // 65536))
                    conn.request("POST", "/upload", body=chunks, encode_chunked=True)
                    response = conn.getresponse()
                    return response.status, response.read()

            status, body = await asyncio.to_thread(run)
            assert status == 200 and f"body: {size}\n".encode() in body
            assert values(state.seen[0], b"transfer-encoding") == [b"chunked"]
            assert values(state.seen[0], b"authorization") == [b"Bearer " + VALUE]

    asyncio.run(scenario())


def test_a_strict_proxy_refuses_another_hosts_placeholder(tmp_path: Path) -> None:
    other = Injection(("*.other.test",), None, b"{value}", b"sbx_ph_other0001", b"other-VALUE")

    async def scenario() -> None:
        async with lab(tmp_path) as (state, ca):
            state.interception.secrets.append(other)
            state.interception.strict_placeholders = True

            def run() -> tuple[int, bytes]:
                with guest(state.port, ca.client_context()) as conn:
                    return get(conn, **{"x-key": "sbx_ph_other0001"})

            status, body = await asyncio.to_thread(run)
            assert status == 403 and b"*.other.test" in body
            assert VALUE not in body and b"other-VALUE" not in body and state.seen == []

    asyncio.run(scenario())


def test_pipelined_requests_are_each_checked_and_injected(tmp_path: Path) -> None:
    two = (
        b"GET /1 HTTP/1.1\r\nHost: echo.test\r\n\r\n"
        b"GET /2 HTTP/1.1\r\nHost: echo.test\r\nConnection: close\r\n\r\n"
    )

    async def scenario() -> None:
        async with lab(tmp_path) as (state, ca):
            answer = await asyncio.to_thread(raw_guest, state.port, ca.client_context(), two)
            assert answer.count(b"HTTP/1.1 200 ") == 2
            assert [values(h, b"target") for h in state.seen] == [[b"/1"], [b"/2"]]
            assert all(values(h, b"authorization") == [b"Bearer " + VALUE] for h in state.seen)

    asyncio.run(scenario())


def test_after_a_101_bytes_go_raw_both_ways(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with lab(tmp_path) as (state, ca):

            def run() -> bytes:
                raw = socket.create_connection(("127.0.0.1", state.port), timeout=10)
                with ca.client_context().wrap_socket(raw, server_hostname=NAME) as tls:
                    tls.sendall(
                        b"GET /ws HTTP/1.1\r\nHost: echo.test\r\nUpgrade: websocket\r\n"
                        b"Sec-WebSocket-Extensions: permessage-deflate\r\n"
                        b"Connection: Upgrade\r\n\r\nhello "
                    )
                    answer = b""
                    while b"HELLO " not in answer:
                        answer += tls.recv(65536)
                    tls.sendall(b"world")
                    while b"WORLD" not in answer:
                        answer += tls.recv(65536)
                    return answer

            answer = await asyncio.to_thread(run)
            assert answer.startswith(b"HTTP/1.1 101 ") and answer.endswith(b"HELLO WORLD")
            assert values(state.seen[0], b"authorization") == [b"Bearer " + VALUE]
            assert values(state.seen[0], b"connection") == [b"Upgrade"]
            # compressed messages would pass the scanner unread: no extension is asked for
            assert values(state.seen[0], b"sec-websocket-extensions") == []

    asyncio.run(scenario())


def test_a_guest_that_does_not_trust_the_ca_is_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with lab(tmp_path) as (state, _):
            with pytest.raises(ssl.SSLCertVerificationError):
                await asyncio.to_thread(raw_guest, state.port, Ca("X").client_context(), b"")
            while not state.refused:
                await asyncio.sleep(0.01)
            assert "did not complete TLS" in state.refused[0].reason and state.seen == []

    asyncio.run(scenario())


def request(conn: http.client.HTTPConnection, method: str, path: str) -> tuple[int, bytes]:
    conn.request(method, path)
    response = conn.getresponse()
    return response.status, response.read()


@pytest.mark.parametrize("path", ["/leak-body", "/leak-header", "/leak-basic"])
def test_a_response_that_carries_the_value_is_not_relayed(tmp_path: Path, path: str) -> None:
    async def scenario() -> None:
        async with lab(tmp_path) as (state, ca):

            def run() -> tuple[int, bytes]:
                with guest(state.port, ca.client_context()) as conn:
                    return request(conn, "GET", path)

            status, body = await asyncio.to_thread(run)
            assert status == 502 and b"carries a secret's value" in body
            assert VALUE not in body and base64.b64encode(b"me:" + VALUE)[4:20] not in body
        # the lab is over: every handler has ended
        assert state.refused[0].status == 502 and VALUE.decode() not in state.refused[0].reason

    asyncio.run(scenario())


def test_a_value_late_in_a_streamed_body_cuts_the_connection(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with lab(tmp_path) as (state, ca):
            loop = asyncio.get_running_loop()

            def run() -> bytes:
                with guest(state.port, ca.client_context()) as conn:
                    conn.request("GET", "/leak-late")
                    response = conn.getresponse()  # the head and the filler went on
                    assert response.status == 200
                    loop.call_soon_threadsafe(state.go_on.set)
                    with pytest.raises(http.client.IncompleteRead) as cut:
                        response.read()
                    return cut.value.partial

            partial = await asyncio.to_thread(run)
            assert partial == b"f" * len(partial) and VALUE[:3] not in partial
        assert state.refused[0].reason == LEAK_REASON

    asyncio.run(scenario())


def test_after_a_101_the_value_does_not_come_down(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with lab(tmp_path) as (state, ca):
            send = (
                b"GET /ws-leak HTTP/1.1\r\nHost: echo.test\r\nUpgrade: websocket\r\n"
                b"Connection: Upgrade\r\n\r\nhello"
            )
            answer = await asyncio.to_thread(raw_guest, state.port, ca.client_context(), send)
            assert VALUE not in answer and VALUE[:4] not in answer.partition(b"\r\n\r\n")[2]
            assert state.refused and state.refused[-1].reason == LEAK_REASON  # and it is said

    asyncio.run(scenario())


def test_a_normal_response_and_its_request_as_the_upstream_sees_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with lab(tmp_path) as (state, ca):

            def run() -> tuple[int, bytes]:
                with guest(state.port, ca.client_context()) as conn:
                    return get(
                        conn, "/plain", **{"Accept-Encoding": "gzip, br", "Range": "bytes=0-3"}
                    )

            status, body = await asyncio.to_thread(run)
            assert status == 200 and body.startswith(b"target: /plain\n")  # whole, unchanged
            assert values(state.seen[0], b"accept-encoding") == [b"identity"]
            assert values(state.seen[0], b"range") == []

    asyncio.run(scenario())


def test_a_compressed_response_is_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with lab(tmp_path) as (state, ca):

            def run() -> tuple[int, bytes]:
                with guest(state.port, ca.client_context()) as conn:
                    return request(conn, "GET", "/gzip")

            status, body = await asyncio.to_thread(run)
            assert status == 502 and b"compressed" in body

    asyncio.run(scenario())


@pytest.mark.parametrize("method", ["TRACE", "TRACK"])
def test_trace_is_refused_before_going_upstream(tmp_path: Path, method: str) -> None:
    async def scenario() -> None:
        async with lab(tmp_path) as (state, ca):

            def run() -> tuple[int, bytes]:
                with guest(state.port, ca.client_context()) as conn:
                    return request(conn, method, "/")

            status, body = await asyncio.to_thread(run)
            assert status == 405 and b"TRACE" in body and state.seen == []

    asyncio.run(scenario())
