"""The browser computer type on real guests: an agent on the host drives its Chromium with
Playwright's connect_over_cdp through the published DevTools port, people get the noVNC watch
page and the VNC display as a WebSocket through the other published port, Chromium runs as an
unprivileged user with its sandbox on, and its profile persists across stop and start."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import sync_playwright
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect
from websockets.typing import Subprotocol

from sanbox import Sanbox
from sanbox.sdk import Computer

from .conftest import build_type, claimed_from_pool, cli
from .server import ServerProcess

pytestmark = [pytest.mark.vm, pytest.mark.timeout(3600)]

NAME = "browser-t"
CDP, VNC = 9223, 6080
# Playwright's driver (node) resolves names with getaddrinfo, which here knows nothing of
# *.localhost; browsers and systemd-resolved send them to loopback (RFC 6761), so does this.
DNS_SHIM = r"""
const dns = require('dns');
const local = (h) => typeof h === 'string' && /\.localhost\.?$/i.test(h);
const lookup = dns.lookup;
dns.lookup = function (host, options, cb) {
  if (typeof options === 'function') { cb = options; options = {}; }
  if (typeof options === 'number') options = { family: options };
  if (!local(host)) return lookup.call(this, host, options, cb);
  const one = { address: '127.0.0.1', family: 4 };
  if (options && options.all) return process.nextTick(cb, null, [one]);
  return process.nextTick(cb, null, one.address, one.family);
};
const plookup = dns.promises.lookup;
dns.promises.lookup = async function (host, options) {
  if (!local(host)) return plookup.call(this, host, options);
  const one = { address: '127.0.0.1', family: 4 };
  return options && options.all ? [one] : one;
};
"""
PAGE = b"<!DOCTYPE html><title>Hello from the guest</title><p>served by the browser computer"


def sh(c: Computer, command: str, user: str | None = None) -> str:
    r = c.exec(command, timeout=120, user=user)
    assert r.exit_code == 0, f"{command}: {r.stdout}{r.stderr}"
    return r.stdout.strip()


def port_url(c: Computer, port: int) -> str:
    return next(p.url for p in c.ports() if p.port == port).rstrip("/")


def via_server(server: ServerProcess, url: str, path: str) -> httpx.Response:
    """GET `path` of a published URL: to the server's loopback port, the URL's host as Host."""
    headers = {"Host": urlsplit(url).netloc, "Authorization": f"Bearer {server.key}"}
    return httpx.get(f"{server.url}{path}", headers=headers, timeout=60)


def wait_for_cdp(server: ServerProcess, url: str, timeout: float = 300) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            r = via_server(server, url, "/json/version")
            if r.status_code == 200:
                return dict(r.json())
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "DevTools did not answer through the published port"
        time.sleep(1)


@pytest.fixture(scope="module")
def node_resolves_localhost(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    shim = tmp_path_factory.mktemp("shim") / "localhost.js"
    shim.write_text(DNS_SHIM)
    before = os.environ.get("NODE_OPTIONS")
    os.environ["NODE_OPTIONS"] = f"--require {shim}"
    yield
    if before is None:
        os.environ.pop("NODE_OPTIONS", None)
    else:
        os.environ["NODE_OPTIONS"] = before


@pytest.fixture(scope="module")
def browser(types_server: ServerProcess, types_client: Sanbox) -> Iterator[Computer]:
    started = time.monotonic()
    build_type(types_server, "browser")
    print(f"[browser] type built (or up to date) in {time.monotonic() - started:.0f}s")
    r = cli(types_server, "create", "--type", "browser", "--name", NAME)
    assert r.returncode == 0 and "start: restored" in r.stdout, r.stdout + r.stderr
    c = types_client.computers.get(NAME)
    yield c
    c.delete()


def test_an_agent_drives_chromium_over_cdp_through_the_published_port(
    types_server: ServerProcess, browser: Computer, node_resolves_localhost: None
) -> None:
    url = port_url(browser, CDP)
    version = wait_for_cdp(types_server, url)
    netloc = urlsplit(url).netloc
    assert version["webSocketDebuggerUrl"].startswith(f"ws://{netloc}/devtools/browser/"), version
    browser.files.write("/srv/hello.html", PAGE)
    with sync_playwright() as p:
        b = p.chromium.connect_over_cdp(
            url, headers={"Authorization": f"Bearer {types_server.key}"}, timeout=120_000
        )
        page = b.contexts[0].new_page()
        page.goto("file:///srv/hello.html", timeout=120_000)
        assert page.title() == "Hello from the guest"
        page.goto("chrome://sandbox", timeout=120_000)
        assert "adequately sandboxed" in page.inner_text("body", timeout=60_000)
        page.close()  # leaving Playwright disconnects; the browser stays


def test_chromium_runs_as_the_browser_user_with_its_sandbox_on(browser: Computer) -> None:
    rows = sh(browser, "ps -o user=,args= -C chromium").splitlines()
    assert rows, "no chromium process"
    assert all(row.split()[0] == "browser" for row in rows), rows
    assert not [row for row in rows if "--no-sandbox" in row], rows
    assert any("--user-data-dir=/home/browser/profile" in row for row in rows), rows
    assert sh(browser, "unshare --user --map-root-user true && echo ok", user="browser") == "ok"


def test_people_watch_and_take_over_through_novnc(
    types_server: ServerProcess, browser: Computer
) -> None:
    url = port_url(browser, VNC)
    page = via_server(types_server, url, "/watch.html")
    assert page.status_code == 200 and "novnc/core/rfb.js" in page.text
    assert "viewOnly = true" in page.text and "Take over" in page.text
    assert via_server(types_server, url, "/").status_code == 200
    rfb = via_server(types_server, url, "/novnc/core/rfb.js")
    assert rfb.status_code == 200 and "javascript" in rfb.headers["content-type"]
    sock = socket.create_connection(("127.0.0.1", types_server.port))
    ws_url = f"ws://{urlsplit(url).netloc}/websockify"
    headers = {"Authorization": f"Bearer {types_server.key}"}
    with connect(
        ws_url,
        sock=sock,
        open_timeout=60,
        additional_headers=headers,
        subprotocols=[Subprotocol("binary")],
    ) as ws:
        assert ws.recv(timeout=60) == b"RFB 003.008\n"


def test_a_view_only_watcher_sees_the_screen_and_cannot_drive_it(
    types_server: ServerProcess, browser: Computer
) -> None:
    """A view-only cookie (`?sanbox_view=1`) opens the page and the VNC WebSocket from the
    port's own origin; the server lets the RFB handshake through and closes on input it cannot
    frame; a foreign Origin is refused before the guest is reached."""
    url = port_url(browser, VNC)
    netloc = urlsplit(url).netloc
    r = httpx.get(
        f"{types_server.url}/watch.html?token={types_server.key}&sanbox_view=1",
        headers={"Host": netloc},
        timeout=60,
    )
    assert r.status_code == 200 and "sanbox_port=" in r.headers["set-cookie"], r.text
    cookie = r.headers["set-cookie"].split(";")[0]
    page = httpx.get(
        f"{types_server.url}/watch.html", headers={"Host": netloc, "Cookie": cookie}, timeout=60
    )
    assert page.status_code == 200 and "novnc/core/rfb.js" in page.text
    ws_url = f"ws://{netloc}/websockify"
    mine = {"Cookie": cookie, "Origin": f"http://{netloc}"}
    sock = socket.create_connection(("127.0.0.1", types_server.port))
    binary = [Subprotocol("binary")]
    with connect(
        ws_url, sock=sock, open_timeout=60, additional_headers=mine, subprotocols=binary
    ) as ws:
        assert ws.recv(timeout=60) == b"RFB 003.008\n"
        ws.send(b"RFB 003.008\n")
        types = ws.recv(timeout=60)
        assert isinstance(types, bytes) and 1 in types[1:]  # Xvnc offers security None
        ws.send(b"\x01")
        assert ws.recv(timeout=60) == b"\x00\x00\x00\x00"  # SecurityResult: OK
        ws.send(b"\x01")  # ClientInit
        assert len(ws.recv(timeout=60)) >= 24  # ServerInit: the screen's size and format
        ws.send(b"\x05\x01\x00\x10\x00\x10")  # a click: dropped, the connection stays
        ws.send(b"\x03\x00\x00\x00\x00\x00\x00\x10\x00\x10")  # an update request passes
        assert ws.recv(timeout=60)
        ws.send(b"\xfe\x00")  # a message the filter cannot frame: the server closes
        with pytest.raises(ConnectionClosed):
            while True:
                ws.recv(timeout=60)
    sock = socket.create_connection(("127.0.0.1", types_server.port))
    foreign = {"Cookie": cookie, "Origin": "http://8080-other.localhost:7070"}
    with pytest.raises(InvalidStatus):
        connect(ws_url, sock=sock, open_timeout=60, additional_headers=foreign)


def test_the_profile_persists_across_stop_and_start(
    types_server: ServerProcess, browser: Computer, node_resolves_localhost: None
) -> None:
    url = port_url(browser, CDP)
    auth = {"Authorization": f"Bearer {types_server.key}"}
    cookie = {
        "name": "sanbox_kept",
        "value": "yes",
        "url": "https://kept.example/",
        "expires": time.time() + 86400,
    }
    with sync_playwright() as p:
        b = p.chromium.connect_over_cdp(url, headers=auth, timeout=120_000)
        b.contexts[0].add_cookies([cookie])  # type: ignore[list-item]
    # Chromium writes its cookie store every 30 s or so
    wait = "for i in $(seq 120); do grep -qa sanbox_kept /home/browser/profile/Default/Cookies* && exit 0; sleep 1; done; exit 1"  # noqa: E501
    sh(browser, wait)
    sh(browser, "sync")
    browser.stop()
    browser.start()
    wait_for_cdp(types_server, url)
    with sync_playwright() as p:
        b = p.chromium.connect_over_cdp(url, headers=auth, timeout=120_000)
        kept = b.contexts[0].cookies("https://kept.example/")
    assert [(k["name"], k["value"]) for k in kept] == [("sanbox_kept", "yes")]


def test_a_warm_pool_hands_out_browsers_an_agent_can_drive(
    types_server: ServerProcess, types_client: Sanbox, browser: Computer
) -> None:
    with claimed_from_pool(types_server, types_client, "browser", NAME + "-pooled") as c:
        url = port_url(c, CDP)
        version = wait_for_cdp(types_server, url)
        ws = f"ws://{urlsplit(url).netloc}/devtools/browser/"  # its own URL, not the member's
        assert version["webSocketDebuggerUrl"].startswith(ws), version
        assert via_server(types_server, port_url(c, VNC), "/").status_code == 200


def test_chromium_starts_again_with_the_computers_own_identity(browser: Computer) -> None:
    """A computer made from the type's ready snapshot got a new machine-id: the Chromium it was
    copied with (its BoringSSL generator in memory) ended and a new one runs."""
    log = sh(browser, "cat /var/log/sanbox/services/chromium.log")
    assert "a new machine-id: chromium starts again" in log, log[-2000:]
    assert sh(browser, "ps -o user= -C chromium | head -1") == "browser"
