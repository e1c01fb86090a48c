"""The console in a real Chromium against a real server: log in, a computer appearing as running
without a reload, terminals, files, ports, CSRF, revoked keys and org isolation."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import Live, log_in, shot

pytestmark = pytest.mark.browser
TIMEOUT = 30_000  # ms


@pytest.fixture(scope="module")
def page(browser: Any, live: Live) -> Any:
    found = log_in(browser, live, live.key)
    yield found
    found.context.close()


@pytest.fixture(scope="module")
def computer(page: Any, live: Live) -> str:
    """web1, created from the page and seen running there without a reload."""
    page.goto("/console/computers")
    page.fill("#create-name", "web1")
    # the stand-in's shells are this host's own login shells: a HOME of their own keeps them off
    # the host's profile (a slow one, a lock another shell left)
    home = Path(tempfile.mkdtemp(prefix="sbhome", dir=live.root))
    page.fill("#create-env", f"HOME={home}")
    page.click("#create-submit")
    row = page.locator("#rows tr", has_text="web1")
    row.locator(".state-running").wait_for(timeout=TIMEOUT)
    shot(page, "computers")
    return str(row.get_attribute("data-id"))


def prompt(page: Any, index: int) -> None:
    """Wait for the shell's prompt: a shell may drop what was typed before it was ready."""
    page.wait_for_function(
        "i => [...document.querySelectorAll('.term-pane')[i]"
        ".querySelectorAll('.xterm-rows > div')].some(d => /[#$] ?$/.test(d.textContent.trim()))",
        arg=index,
        timeout=TIMEOUT,
    )


def test_login_keeps_the_key_out_of_pages_urls_and_cookies(page: Any, live: Live) -> None:
    cookies = page.context.cookies()
    assert [c["name"] for c in cookies] == ["sanbox_console"]
    assert cookies[0]["httpOnly"] and cookies[0]["sameSite"] == "Strict"
    for path in ("/console/computers", "/console/templates", "/console/secrets", "/console/admin"):
        page.goto(path)
        assert live.key not in page.content() and live.key not in page.url
        shot(page, path.rsplit("/", 1)[1])
    assert all(live.key not in c["value"] for c in page.context.cookies())
    assert page.evaluate("document.cookie") == ""  # HttpOnly: no script reads it
    stored = page.evaluate("JSON.stringify([{...localStorage}, {...sessionStorage}])")
    assert live.key not in stored and "csrf" not in stored


def test_created_computer_appears_running_without_reload(computer: str) -> None:
    assert computer.startswith("cmp_")


def test_terminal_tabs(page: Any, computer: str) -> None:
    page.goto(f"/console/computers/{computer}")
    prompt(page, 0)
    page.locator(".term-pane").first.click()
    page.keyboard.type("echo hi\n")
    page.wait_for_function(
        "() => [...document.querySelectorAll('.term-pane')[0]"
        ".querySelectorAll('.xterm-rows > div')].some(d => d.textContent.trim() === 'hi')",
        timeout=TIMEOUT,
    )
    page.click("#new-terminal")
    assert page.locator(".term-tab").count() == 2
    prompt(page, 1)
    page.locator(".term-pane").nth(1).click()
    page.keyboard.type("echo second-$((40+2))\n")
    page.wait_for_function(
        "() => [...document.querySelectorAll('.term-pane')[1]"
        ".querySelectorAll('.xterm-rows > div')].some(d => d.textContent.trim() === 'second-42')",
        timeout=TIMEOUT,
    )
    shot(page, "computer-terminal")


def test_cpu_and_memory_charts(page: Any, computer: str) -> None:
    deadline = time.monotonic() + 30  # the meter asks the guest every 0.5 s here
    while True:
        page.goto(f"/console/computers/{computer}")
        charts = page.locator("#charts svg.chart")
        assert charts.count() == 2
        points = charts.nth(1).locator("polyline").get_attribute("points") or ""
        if len(points.split()) >= 2 or time.monotonic() > deadline:
            break
        page.wait_for_timeout(500)
    assert len(points.split()) >= 2, "memory was sampled over time"
    assert "Memory:" in (charts.nth(1).text_content() or "")


def test_the_orgs_use_over_time(page: Any, computer: str) -> None:
    """The usage page draws the org's days from its usage records: today's bar is not empty
    while a computer of the org runs, and the computer has its row."""
    page.goto("/console/usage")
    charts = page.locator("#usage-charts svg.chart")
    assert charts.count() == 2
    today = charts.nth(1).locator("rect[fill='#0969da']").last
    assert float(today.get_attribute("height") or 0) > 0, "today's running hours drawn"
    assert "web1" in (page.locator("#usage-table").text_content() or "")
    shot(page, "usage")


def test_upload_then_read_back_through_exec(page: Any, live: Live, computer: str) -> None:
    folder = Path(tempfile.mkdtemp(prefix="sbup", dir=live.root))
    local = folder / "local"
    local.mkdir()
    (local / "note.txt").write_text("uploaded from the console\n")
    page.goto(f"/console/computers/{computer}")
    page.fill("#files-path", str(folder))
    page.click("#files-nav button")
    page.locator(f"#files-listing[data-path='{folder}']").wait_for(timeout=TIMEOUT)
    page.set_input_files("#upload-input", str(local / "note.txt"))
    page.locator("#files-listing tr[data-name='note.txt']").wait_for(timeout=TIMEOUT)
    shot(page, "computer-files")
    with live.api() as api:
        out = api.post(
            f"/v1/computers/{computer}/exec", json={"cmd": ["cat", f"{folder}/note.txt"]}
        )
    assert out.json()["stdout"] == "uploaded from the console\n"
    page.fill("#mkdir-name", "made-here")
    page.click("#mkdir button")
    page.locator("#files-listing tr[data-name='made-here']").wait_for(timeout=TIMEOUT)
    assert (folder / "made-here").is_dir()
    with page.expect_download() as got:
        page.click("#files-listing tr[data-name='note.txt'] a")
    assert Path(got.value.path()).read_text() == "uploaded from the console\n"
    page.click("#files-listing tr[data-name='note.txt'] .file-delete")
    page.locator("#files-listing tr[data-name='note.txt']").wait_for(state="detached")
    assert not (folder / "note.txt").exists()


def test_publish_a_port_and_open_it(page: Any, live: Live, computer: str) -> None:
    from tests.conftest import free_port

    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="sbweb", dir=live.root))
    (folder / "index.html").write_text("<h1>served by the computer</h1>")
    with live.api() as api:
        serve = f"{sys.executable} -m http.server {port} --bind 127.0.0.1"
        cmd = f"cd {folder} && nohup {serve} >/dev/null 2>&1 & echo $!"
        started = api.post(f"/v1/computers/{computer}/exec", json={"cmd": ["sh", "-c", cmd]})
        pid = int(started.json()["stdout"].strip())
    try:
        open_the_published_port(page, computer, port)
    finally:  # the stand-in's 'guest' is this host: what the test started there must end
        with live.api() as api:
            api.post(f"/v1/computers/{computer}/exec", json={"cmd": ["kill", str(pid)]})


def open_the_published_port(page: Any, computer: str, port: int) -> None:
    page.goto(f"/console/computers/{computer}")
    page.fill("#publish-port", str(port))
    page.click("#publish")
    button = page.locator(f"#ports tr[data-port='{port}'] .open-port")
    button.wait_for(timeout=TIMEOUT)
    with page.context.expect_page() as opened:
        button.click()
    served = opened.value
    served.wait_for_load_state()
    served.locator("h1", has_text="served by the computer").wait_for(timeout=TIMEOUT)
    shot(served, "published-port")
    served.close()


def test_a_template_build_streams_its_log(page: Any, live: Live) -> None:
    """The log streams as the build runs. (With the stand-in the build then fails at its
    snapshot, which needs QEMU's monitor, and the log says so: builds that succeed are the vm
    tier's, tests/vm/test_templates.py.)"""
    folder = Path(tempfile.mkdtemp(prefix="sbtpl", dir=live.root)) / "webtpl"
    folder.mkdir()
    (folder / "sanbox.toml").write_text(
        'name = "webtpl"\n\n[[steps]]\nrun = "cat /dev/null; echo built-by-the-console"\n'
    )
    (folder / "notes.txt").write_text("a file the page packs into the build context\n")
    page.goto("/console/templates")
    page.set_input_files("#build-folder", str(folder))  # a folder: the page packs it as a tar
    page.click("#build-submit")
    for words in ("[step 1/", "built-by-the-console", "[done: ", "[log ended]"):
        page.wait_for_function(
            "w => document.getElementById('build-log').textContent.includes(w)",
            arg=words,
            timeout=TIMEOUT,
        )
    page.locator("#templates tr[data-name=webtpl]").wait_for(timeout=TIMEOUT)
    shot(page, "template-build")
    # its build has ended: it can be built again, no upload, from the table the page put in
    # place of the old one (no reload: its buttons must work as they are)
    row = page.locator("#templates tr[data-name=webtpl]")
    # the answer asks the page to reload (HX-Refresh): wait for that too, or the next test's
    # navigation races it
    with (
        page.expect_navigation(timeout=TIMEOUT),
        page.expect_response(lambda r: r.url.endswith("/rebuild")) as answer,
    ):
        row.locator("button.rebuild").click()
    assert answer.value.status == 204, answer.value.text()
    page.locator("#templates tr[data-name=webtpl]").wait_for(timeout=TIMEOUT)


def test_a_post_without_the_csrf_token_is_refused(page: Any, live: Live) -> None:
    page.goto("/console/computers")
    origin = {"Origin": live.url}
    refused = page.request.post("/console/computers", form={"name": "sneaky"}, headers=origin)
    assert refused.status == 403 and refused.json()["error"]["code"] == "csrf_failed"
    token = page.locator("meta[name=csrf-token]").get_attribute("content")
    foreign = page.request.post(
        "/console/computers",
        form={"name": "sneaky"},
        headers={"Origin": "http://evil.example", "X-CSRF-Token": token},
    )
    assert foreign.status == 403
    with live.api() as api:
        names = [c["name"] for c in api.get("/v1/computers").json()["computers"]]
    assert "sneaky" not in names
    with live.api() as api:  # console writes are audited as the API's are, refused ones too
        records = api.get("/v1/audit", params={"limit": 50}).json()["records"]
    refusals = [r for r in records if r["action"] == "POST /console/computers"]
    assert refusals and refusals[-1]["code"] == "csrf_failed" and refusals[-1]["status"] == 403
    assert all(live.key not in str(r) for r in records)


def test_revoked_key_logs_its_session_out(
    browser: Any, page: Any, live: Live, computer: str
) -> None:
    with live.api() as api:
        made = api.post("/v1/keys", json={"name": "visitor"}).json()
    other = log_in(browser, live, made["key"])
    assert other.locator("nav >> text=Admin").count() == 0  # a member key: no admin pages
    refused = other.goto("/console/admin")
    assert refused is not None and refused.status == 403
    assert "admin API key" in other.content()
    other.goto(f"/console/computers/{computer}")  # a terminal open when the key goes
    prompt(other, 0)
    page.goto("/console/admin")
    revoke = page.locator(f"#keys tr[data-key='{made['id']}'] button", has_text="Revoke")
    revoke.click()
    revoke.wait_for(state="detached", timeout=TIMEOUT)  # the page reloads with the key revoked
    other.wait_for_function(
        "() => document.querySelector('.term-pane').textContent.includes('session ended')",
        timeout=TIMEOUT,
    )
    other.click("nav >> text=Templates")
    other.wait_for_url("**/console/login?why=ended")
    assert "revoked" in other.content()
    shot(other, "logged-out")
    other.context.close()


def test_another_org_sees_none_of_the_first_orgs_computers(
    browser: Any, live: Live, computer: str
) -> None:
    with live.api() as api:
        api.post("/v1/orgs", json={"name": "other"}).raise_for_status()
        made = api.post("/v1/keys", json={"org": "other", "name": "o"}).json()
    other = log_in(browser, live, made["key"])
    assert other.locator("#rows tr").count() == 0
    assert "web1" not in other.content()
    denied = other.goto(f"/console/computers/{computer}")
    assert denied is not None and denied.status == 404
    shot(other, "other-org")
    other.context.close()


def test_phone_width(browser: Any, live: Live, computer: str) -> None:
    phone = log_in(browser, live, live.key, width=390)
    phone.goto(f"/console/computers/{computer}")
    shot(phone, "computer-phone")
    assert live.key not in phone.content()
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390 + 40
    phone.context.close()


def test_a_login_link_works_once(browser: Any, live: Live) -> None:
    from sanbox.sdk import Sanbox

    with Sanbox(live.url, live.key) as client:
        url = client.console_link()
    assert live.key not in url
    context = browser.new_context()
    page = context.new_page()
    page.goto(url)
    shot(page, "login-link")
    page.click("#link-login")
    assert "#" not in page.url
    asked = page.locator("#link-org")  # logged out: it names the org and the key first
    asked.wait_for(timeout=TIMEOUT)
    assert "org default" in asked.inner_text() and page.url.endswith("/console/link")
    page.click("#link-confirm")
    page.wait_for_url("**/console/computers")
    again = context.new_page()
    again.goto(url)
    again.click("#link-login")
    again.wait_for_url("**/console/login?why=link")
    shot(again, "login")
    context.close()


class FakeDisplay:
    """A VNC server's stand-in on this host's 127.0.0.1:5901 (where the stand-in's computers'
    loopback is this host's): it greets as RFB 3.8 with security None and records every byte a
    client sends."""

    def __init__(self) -> None:
        import socket
        import threading

        self.received = bytearray()
        self.sock = socket.create_server(("127.0.0.1", 5901))
        self.sock.settimeout(30)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        import contextlib

        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.sock.accept()
                with conn:
                    conn.sendall(b"RFB 003.008\n")
                    conn.sendall(bytes([1, 1]))  # one security type: None
                    while chunk := conn.recv(65536):
                        self.received += chunk
                        if self.received.endswith(b"RFB 003.008\n" + bytes([1])):
                            conn.sendall(bytes(4))  # SecurityResult: OK

    def close(self) -> None:
        self.sock.close()


def test_screen_watch_drops_input_and_take_over_passes_it(
    page: Any, live: Live, computer: str
) -> None:
    """The server, not the page, keeps watching read-only: a client that sends key and pointer
    events on the watch socket reaches the display with none of them."""
    import struct

    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    try:
        display = FakeDisplay()
    except OSError:
        pytest.skip("127.0.0.1:5901 is taken on this host")
    cookie = next(c for c in page.context.cookies() if c["name"] == "sanbox_console")
    headers = {"Origin": live.url, "Cookie": f"sanbox_console={cookie['value']}"}
    ws_url = live.url.replace("http", "ws") + f"/console/computers/{computer}/screen/"
    key = struct.pack(">BBxxI", 4, 1, 0x61)
    pointer = struct.pack(">BBHH", 5, 1, 10, 20)
    update = struct.pack(">BBHHHH", 3, 0, 0, 0, 64, 64)
    try:
        for mode in ("watch", "control"):
            display.received.clear()
            with connect(ws_url + mode, additional_headers=headers) as ws:
                assert ws.recv(timeout=10)[:12] == b"RFB 003.008\n"
                ws.send(b"RFB 003.008\n" + bytes([1]))
                ws.send(bytes([1]) + key + pointer + update)
                deadline = time.monotonic() + 10
                while update not in display.received and time.monotonic() < deadline:
                    time.sleep(0.05)
            assert update in display.received
            sent_input = key in display.received or pointer in display.received
            assert sent_input == (mode == "control"), mode
        foreign = {**headers, "Origin": "http://evil.example"}
        with pytest.raises(InvalidStatus):  # refused before any byte: it came from another site
            connect(ws_url + "watch", additional_headers=foreign)
    finally:
        display.close()


def test_allowlist_edit(page: Any, live: Live, computer: str) -> None:
    page.goto(f"/console/computers/{computer}")
    before = page.locator("#event-list li").count()
    page.fill("#allow", "pypi.org\n*.pythonhosted.org")
    page.click("#network button[type=submit]")
    page.locator("#network-said", has_text="allowlist saved").wait_for(timeout=TIMEOUT)
    page.wait_for_function(  # the event arrives live, over the page's stream
        "n => document.querySelectorAll('#event-list li').length > n", arg=before, timeout=TIMEOUT
    )
    assert "network.policy" in page.locator("#event-list li").first.inner_text()
    with live.api() as api:
        assert api.get(f"/v1/computers/{computer}/network").json()["allow"] == [
            "pypi.org",
            "*.pythonhosted.org",
        ]


def test_secret_values_are_write_only(page: Any, live: Live) -> None:
    value = "s3cr3t-value-the-page-never-shows"
    page.goto("/console/secrets")
    page.fill("input[name=name]", "token")
    page.fill("input[name=value]", value)
    page.fill("input[name=hosts]", "api.example.com")
    page.click("form button[type=submit]")
    page.locator("#secrets-table tr[data-name=token]").wait_for(timeout=TIMEOUT)
    assert "api.example.com" in page.content() and value not in page.content()
    shot(page, "secrets")


def test_a_new_key_is_shown_once(page: Any, live: Live) -> None:
    page.goto("/console/admin")
    page.fill("form[hx-post='/console/admin/keys'] input[name=name]", "made-in-console")
    page.click("form[hx-post='/console/admin/keys'] button")
    key = page.locator("#new-key").inner_text().strip()
    with live.api(key) as api:
        assert api.get("/v1/computers").status_code == 200
    page.goto("/console/admin")
    assert key not in page.content() and "made-in-console" in page.content()


def test_sanbox_console_prints_a_login_link(live: Live) -> None:
    import os
    import subprocess

    env = {**os.environ, "SANBOX_URL": live.url, "SANBOX_API_KEY": live.key}
    out = subprocess.run(
        [sys.executable, "-c", "from sanbox.cli.main import main; main()", "console"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert f"{live.url}/console/link#t=" in out.stdout and live.key not in out.stdout
