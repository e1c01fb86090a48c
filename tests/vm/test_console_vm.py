"""The console against real VMs: pause and resume from the page and read `memory: restored`
(a browser computer's screen: test_typed_browser_console.py, once that type is built). Marked
`browser` and `vm`: run under the VM lock."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sanbox.sdk import Sanbox
from tests.browser.conftest import chromium, log_in, shot, unavailable

from .server import ServerProcess

pytestmark = [pytest.mark.vm, pytest.mark.browser]
TIMEOUT = 180_000  # ms: pauses and resumes under TCG


@pytest.fixture(scope="module")
def chrome() -> Iterator[Any]:
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    with chromium() as found:
        yield found


def test_pause_and_resume_from_the_page_restores_memory(
    chrome: Any, server: ServerProcess, client: Sanbox
) -> None:
    computer = client.computers.create(name="console-pause")
    page = log_in(chrome, server.url, server.key)
    try:
        page.on("dialog", lambda d: d.accept())
        page.goto(f"/console/computers/{computer.id}")
        page.click("#do-pause")
        page.locator("#state[data-state=paused]").wait_for(timeout=TIMEOUT)
        page.click("#do-resume")
        page.locator("#state[data-state=running]").wait_for(timeout=TIMEOUT)
        assert page.locator("#memory-outcome").inner_text().startswith("memory: restored")
        # the terminal the pause cut reconnects by itself to the resumed computer
        page.wait_for_function(
            "() => /disconnected[\\s\\S]*[#$] *$/.test(document.querySelector('.term-pane')"
            ".querySelector('.xterm-rows').innerText.trim())",
            timeout=TIMEOUT,
        )
        page.locator(".term-pane").first.click()
        page.keyboard.type("echo back-$((20+1))\n")
        page.wait_for_function(
            "() => document.querySelector('.term-pane').innerText.includes('back-21')",
            timeout=TIMEOUT,
        )
        shot(page, "computer-resumed")
    finally:
        page.context.close()
        computer.delete()
