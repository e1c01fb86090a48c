"""Published ports: a guest server reachable as http://PORT-NAME.localhost:<server port>/ with the
org's key, 401 without it, public when asked; WebSocket too; reachable no other way."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest
from websockets.sync.client import connect

from sanbox import Sanbox
from sanbox.sdk import Computer

from ..internet import Internet
from .conftest import cli
from .server import ServerProcess

pytestmark = pytest.mark.vm

WS_ECHO = r"""
import base64, hashlib, socket, struct, threading
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
def recvn(c, n):
    b = b""
    while len(b) < n:
        chunk = c.recv(n - len(b))
        if not chunk: raise EOFError
        b += chunk
    return b
def handle(c):
    head = b""
    while b"\r\n\r\n" not in head: head += c.recv(4096)
    key = [l.split(b":", 1)[1].strip() for l in head.split(b"\r\n")
           if l.lower().startswith(b"sec-websocket-key")][0]
    accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")
    while True:
        h = recvn(c, 2); op, n = h[0] & 15, h[1] & 127
        if n == 126: n = struct.unpack("!H", recvn(c, 2))[0]
        elif n == 127: n = struct.unpack("!Q", recvn(c, 8))[0]
        mask = recvn(c, 4) if h[1] & 128 else b"\0\0\0\0"
        data = bytes(b ^ mask[i % 4] for i, b in enumerate(recvn(c, n)))
        if op == 8: c.sendall(b"\x88\x02" + data[:2]); return
        if op == 9: c.sendall(b"\x8a" + bytes([len(data)]) + data); continue
        reply = b"echo:" + data
        c.sendall(bytes([128 | op]) + (bytes([len(reply)]) if len(reply) < 126
                  else b"\x7e" + struct.pack("!H", len(reply))) + reply)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8765)); s.listen()
while True:
    c, _ = s.accept(); threading.Thread(target=handle, args=(c,), daemon=True).start()
"""


@pytest.fixture(scope="module")
def web(client: Sanbox) -> Iterator[Computer]:
    c = client.computers.create(name="web", idle_timeout=0)
    c.exec("mkdir -p /srv && echo 'hello from the guest' > /srv/index.html")
    c.exec("cd /srv && nohup python3 -m http.server 8000 >/dev/null 2>&1 &")
    c.files.write("/root/ws.py", WS_ECHO.encode())
    c.exec("nohup python3 /root/ws.py >/dev/null 2>&1 &")
    c.exec(
        "for i in $(seq 100); do ss -ltn | grep -q :8000 && ss -ltn | grep -q :8765 && break;"
        " sleep 0.2; done"
    )
    yield c
    c.delete()


def get(server: ServerProcess, host: str, key: str | None = None) -> httpx.Response:
    headers = {"Host": host}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return httpx.get(f"http://127.0.0.1:{server.port}/index.html", headers=headers, timeout=60)


def test_private_url_needs_the_key_until_public(server: ServerProcess, web: Computer) -> None:
    r = cli(server, "port", "publish", "web", "8000")
    assert r.returncode == 0 and f"http://8000-web.localhost:{server.port}/" in r.stdout, r.stderr
    host = f"8000-web.localhost:{server.port}"
    assert get(server, host, server.key).text == "hello from the guest\n"
    denied = get(server, host)
    assert denied.status_code == 404 and denied.json()["error"]["code"] == "port_not_found"
    assert get(server, host, "sbk_wrong").status_code == 401
    web.publish(8000, public=True)
    assert get(server, host).text == "hello from the guest\n"
    assert [p.port for p in web.ports()] == [8000]
    web.unpublish(8000)
    assert get(server, host, server.key).status_code == 404


def test_websocket_echo_through_the_published_port(server: ServerProcess, web: Computer) -> None:
    web.publish(8765)
    sock = socket.create_connection(("127.0.0.1", server.port))
    uri = f"ws://8765-web.localhost:{server.port}/chat?token={server.key}"
    with connect(uri, sock=sock, open_timeout=60) as ws:
        ws.send("hi")
        assert ws.recv(timeout=30) == "echo:hi"
        ws.send(b"\x00\x01")
        assert ws.recv(timeout=30) == b"echo:\x00\x01"
    web.unpublish(8765)


def test_the_port_is_reachable_no_other_way(web: Computer, internet: Internet) -> None:
    # from another namespace of ours (the test internet): no route to the guest at all
    r = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            internet.netns,
            "curl",
            "-sS",
            "--max-time",
            "3",
            "http://10.0.0.2:8000/",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode != 0
    # the host's own namespace holds no address or route of any computer (we send nothing out:
    # there, 10.0.0.2 would leave by the host's default route)
    assert (
        "10.0.0." not in subprocess.run(["ip", "-4", "addr"], capture_output=True, text=True).stdout
    )
    assert (
        subprocess.run(
            ["curl", "-sS", "--max-time", "3", "http://127.0.0.1:8000/"], capture_output=True
        ).returncode
        != 0
    )


def test_a_request_wakes_a_suspended_computer(server: ServerProcess, client: Sanbox) -> None:
    c = client.computers.create(name="napper", idle_timeout=0)
    c.exec("mkdir -p /srv && echo awake > /srv/index.html")
    c.exec("cd /srv && nohup python3 -m http.server 8000 >/dev/null 2>&1 &")
    c.exec("for i in $(seq 100); do ss -ltn | grep -q :8000 && break; sleep 0.2; done")
    c.publish(8000, public=True)
    c.update(idle_timeout=2)
    deadline = time.monotonic() + 60
    while c.refresh().state != "suspended":
        assert time.monotonic() < deadline
        time.sleep(0.5)
    assert get(server, f"8000-napper.localhost:{server.port}").text == "awake\n"
    assert c.refresh().state == "running"
    c.update(idle_timeout=0)
    c.delete()


DUMP = r"""
import http.server, json
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open("/root/seen.log", "a") as f:
            f.write(json.dumps([self.path, dict(self.headers.items())]) + "\n")
        body = open("/root/page.txt", "rb").read()
        self.send_response(200); self.send_header("content-length", str(len(body)))
        self.end_headers(); self.wfile.write(body)
http.server.ThreadingHTTPServer(("0.0.0.0", 8001), H).serve_forever()
"""


def _serve_page(c: Computer, page: str) -> None:
    c.files.write("/root/page.txt", page.encode())
    c.files.write("/root/dump.py", DUMP.encode())
    c.exec("nohup python3 /root/dump.py >/dev/null 2>&1 &")
    c.exec("for i in $(seq 100); do ss -ltn | grep -q :8001 && break; sleep 0.2; done")


def test_two_orgs_same_name_same_port_each_get_their_own_page(
    server: ServerProcess, client: Sanbox
) -> None:
    """The attack of the report: org B's computer of the same name publishing the same port,
    publicly, must never answer org A's private URL; and no key reaches either guest."""
    admin = {"Authorization": f"Bearer {server.key}"}
    assert httpx.post(f"{server.url}/v1/orgs", json={"name": "orgb"}, headers=admin).is_success
    r = httpx.post(f"{server.url}/v1/keys", json={"org": "orgb"}, headers=admin)
    b_key = r.json()["key"]
    a = client.computers.create(name="ho-port", idle_timeout=0)
    with Sanbox(server.url, b_key, timeout=600) as b_client:
        b = b_client.computers.create(name="ho-port", idle_timeout=0)
        try:
            _two_orgs(server, a, b, b_key)
        finally:
            b.delete()
            a.delete()


def _two_orgs(server: ServerProcess, a: Computer, b: Computer, b_key: str) -> None:
    """Each URL reaches its own page, with and without keys; nothing of a key reaches a guest."""
    _serve_page(a, "page of A\n")
    _serve_page(b, "page of B\n")
    a_url = a.publish(8001).url  # private, default org: the short form
    b_url = b.publish(8001, public=True).url
    assert a_url == f"http://8001-ho-port.localhost:{server.port}/"
    assert b_url == f"http://8001-ho-port.orgb.localhost:{server.port}/"
    a_host, b_host = f"8001-ho-port.localhost:{server.port}", "8001-ho-port.orgb.localhost"
    assert get(server, a_host).status_code == 404  # never B's public page
    assert get(server, a_host, server.key).text == "page of A\n"
    assert get(server, b_host).text == "page of B\n"
    assert get(server, b_host, b_key).text == "page of B\n"
    assert get(server, a_host, b_key).status_code == 404  # B's key: as if nothing were there
    # a browser's ?token= ends as a cookie: the guest sees neither
    r = httpx.get(
        f"http://127.0.0.1:{server.port}/index.html?token={server.key}",
        headers={"Host": a_host},
        timeout=60,
    )
    assert r.status_code == 200 and 'content="0;url=/index.html"' in r.text
    cookie = r.headers["set-cookie"].split(";")[0]
    r = httpx.get(
        f"http://127.0.0.1:{server.port}/index.html",
        headers={"Host": a_host, "Cookie": cookie},
        timeout=60,
    )
    assert r.text == "page of A\n"
    seen = a.files.read("/root/seen.log").decode() + b.files.read("/root/seen.log").decode()
    assert server.key not in seen and b_key not in seen
    assert "token" not in seen and "sanbox_port" not in seen and "Authorization" not in seen
    # nor does the server's log hold the key that came in the URL
    assert server.key not in server.log.read_text()
