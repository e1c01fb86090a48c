"""A browser computer's screen in the console, against a real browser computer: watched (a
non-blank frame, input refused by the server) and taken over (the mouse moves). After
test_type_browser.py, which waits for the browser type the session builds in the background."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sanbox.sdk import Sanbox
from tests.browser.conftest import chromium, log_in, shot, unavailable

from .conftest import build_type
from .server import ServerProcess

pytestmark = [pytest.mark.vm, pytest.mark.browser, pytest.mark.timeout(3600)]
TIMEOUT = 180_000  # ms: under TCG


@pytest.fixture(scope="module")
def chrome() -> Iterator[Any]:
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    with chromium() as found:
        yield found


# where the X pointer is, read in the guest with libX11 (which Chromium brings) through ctypes
POINTER = """
import ctypes as c
x = c.CDLL("libX11.so.6")
x.XOpenDisplay.restype = c.c_void_p
x.XDefaultRootWindow.restype, x.XDefaultRootWindow.argtypes = c.c_ulong, [c.c_void_p]
x.XQueryPointer.argtypes = [c.c_void_p, c.c_ulong] + [c.c_void_p] * 7
d = x.XOpenDisplay(b":1")
v = [c.c_ulong(), c.c_ulong(), c.c_int(), c.c_int(), c.c_int(), c.c_int(), c.c_uint()]
x.XQueryPointer(d, x.XDefaultRootWindow(d), *[c.byref(a) for a in v])
print(v[2].value, v[3].value)
"""


def pointer(computer: Any) -> str:
    result = computer.exec(["python3", "-c", POINTER], user="browser")
    assert result.exit_code == 0, result.stderr
    return str(result.stdout).strip()


def test_watch_is_view_only_and_take_over_moves_the_mouse(
    chrome: Any, types_server: ServerProcess, types_client: Sanbox
) -> None:
    build_type(types_server, "browser")  # built in the background from the session's start
    computer = types_client.computers.create(template="browser", name="console-screen")
    page = log_in(chrome, types_server.url, types_server.key)
    try:
        page.goto(f"/console/computers/{computer.id}")
        page.locator("#screen-view[data-connected=watch] canvas").wait_for(timeout=TIMEOUT)
        colours = 0
        for _ in range(60):  # until a frame with something on it has arrived
            page.wait_for_timeout(1000)
            colours = page.evaluate(
                "() => { const c = document.querySelector('#screen-view canvas');"
                " const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
                " const seen = new Set(); for (let i = 0; i < d.length; i += 400)"
                " seen.add(d[i] * 65536 + d[i + 1] * 256 + d[i + 2]); return seen.size; }"
            )
            if colours > 1:
                break
        shot(page, "browser-watch")
        assert colours > 1, "a blank frame"
        before = pointer(computer)
        box = page.locator("#screen-view canvas").bounding_box()
        assert box is not None
        page.mouse.move(box["x"] + 40, box["y"] + 40)
        page.mouse.move(box["x"] + 200, box["y"] + 150)
        page.wait_for_timeout(1000)
        assert pointer(computer) == before, "watching moved the pointer"
        page.click("#screen-toggle")
        page.locator("#screen-view[data-connected=control] canvas").wait_for(timeout=TIMEOUT)
        page.wait_for_timeout(2000)  # its handshake done: pointer events are sent
        box = page.locator("#screen-view canvas").bounding_box()
        assert box is not None
        for step in range(1, 11):
            page.mouse.move(box["x"] + 20 * step, box["y"] + 15 * step)
            page.wait_for_timeout(100)
        page.wait_for_timeout(1000)
        assert pointer(computer) != before, "taking over did not move the pointer"
        shot(page, "browser-take-over")
    finally:
        page.context.close()
        computer.delete()
