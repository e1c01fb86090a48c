"""`sanbox server` runs on the event loop and HTTP parser it is tested on, not on whatever else
the environment has: uvicorn's default ("auto") picks uvloop and httptools when they are
installed (as `uvicorn[standard]` installs them), and the egress proxy's kernel relay does not
work on uvloop's transports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import uvicorn

import sanbox.api
from sanbox.cli.server import server


def test_the_server_pins_asyncio_and_h11(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ran: dict[str, Any] = {}
    monkeypatch.setattr(sanbox.api, "create_app", lambda settings: "app")
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: ran.update(kwargs, app=app))
    server(host=None, port=None, data_dir=tmp_path, database_url=None, log_level="warning")
    assert ran["app"] == "app"
    assert (ran["loop"], ran["http"], ran["ws"]) == ("asyncio", "h11", "websockets-sansio")
