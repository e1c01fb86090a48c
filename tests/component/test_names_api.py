"""The table of bad names is refused with 422 and a stable code at every endpoint that takes a
name, and nothing is made."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ..unit.test_names import BAD_NAMES, BAD_TEXT
from .conftest import Server

pytestmark = pytest.mark.component

NAME_FIELDS: dict[str, tuple[str, Callable[[str], dict[str, object]]]] = {
    "computer name": ("/v1/computers", lambda bad: {"name": bad}),
    "template": ("/v1/computers", lambda bad: {"template": bad}),
    "label key": ("/v1/computers", lambda bad: {"labels": {bad: "x"}}),
    "org name": ("/v1/orgs", lambda bad: {"name": bad}),
    "org of a key": ("/v1/keys", lambda bad: {"org": bad}),
}
CODES = {
    "computer name": "invalid_name",
    "template": "invalid_name",
    "label key": "invalid_label",
    "org name": "invalid_name",
    "org of a key": "invalid_name",
}
LABEL_KEY_OK = {"dot.ted", "under_score", "slash/x", "cmp_x"}


@pytest.mark.parametrize("where", list(NAME_FIELDS))
def test_bad_names_are_refused_everywhere(server: Server, where: str) -> None:
    path, body = NAME_FIELDS[where]
    for bad in BAD_NAMES:
        if where == "label key" and bad in LABEL_KEY_OK:
            continue
        r = server.client.post(path, json=body(bad), headers=server.headers())
        assert r.status_code == 422, (where, bad, r.text)
        assert r.json()["error"]["code"] == CODES[where], (where, bad, r.text)
    for bad in BAD_TEXT:
        r = server.client.post(
            "/v1/keys", json={"org": "default", "name": bad}, headers=server.headers()
        )
        assert (r.status_code, r.json()["error"]["code"]) == (422, "invalid_name"), bad
    h = server.headers()
    assert server.client.get("/v1/computers", headers=h).json()["computers"] == []
    assert [o["name"] for o in server.client.get("/v1/orgs", headers=h).json()["orgs"]] == [
        "default"
    ]
    assert not list(server.data_dir.computers.iterdir())


def test_the_trailing_newline_of_the_report(server: Server) -> None:
    r = server.client.post("/v1/computers", json={"name": "ho-nl\n"}, headers=server.headers())
    assert (r.status_code, r.json()["error"]["code"]) == (422, "invalid_name")
    assert "\n" not in r.json()["error"]["message"]


@pytest.mark.parametrize("port", [0, 65536, -1, "x"])
def test_bad_ports_are_refused(server: Server, port: object) -> None:
    r = server.client.post(
        "/v1/computers/none/ports", json={"port": port}, headers=server.headers()
    )
    assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error"
