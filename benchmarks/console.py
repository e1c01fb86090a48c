"""The web console's page load and live update, as medians: time to first render of the
computers page with 50 computers (server answer to the page's `load` in Debian's Chromium), and
from a state change (a stop through the API) to the page showing it (over its SSE stream).

Run: `.venv/bin/python benchmarks/console.py` (needs the chromium package; the computers are
the guest agent as local processes, as in the component tier)."""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))

from tests.browser.conftest import log_in, running_server  # noqa: E402

COMPUTERS = 50
ROUNDS = 10


def main() -> None:
    from playwright.sync_api import sync_playwright

    with running_server() as live:
        with live.api() as api:
            ids = [
                api.post("/v1/computers", json={"name": f"b{i}"}).json()["id"]
                for i in range(COMPUTERS)
            ]
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium")
            page = log_in(browser, live, live.key)
            loads = []
            for _ in range(ROUNDS):
                start = time.perf_counter()
                page.goto("/console/computers")
                page.locator("#rows tr").nth(COMPUTERS - 1).wait_for()
                loads.append(time.perf_counter() - start)
            updates = []
            with live.api() as api:
                for cid in ids[:ROUNDS]:
                    start = time.perf_counter()
                    api.post(f"/v1/computers/{cid}/stop")
                    page.locator(f"#row-{cid}[data-state=stopped]").wait_for()
                    updates.append(time.perf_counter() - start)
            browser.close()
        print(
            f"computers page, {COMPUTERS} computers, first render: "
            f"median {statistics.median(loads) * 1000:.0f} ms"
        )
        print(
            f"state change to page (stop through the API, seen over SSE): "
            f"median {statistics.median(updates) * 1000:.0f} ms (includes the stop itself)"
        )


if __name__ == "__main__":
    main()
