"""A signed file URL (`download_url()`, `upload_url()`) acts as the user it was signed for, and
only that one: an `Authorization: Basic` header beside the signature does not change the user
(E2B's envd takes a signed request's user from its query alone)."""

from __future__ import annotations

import base64

import pytest

from sanbox.e2b.identity import file_signature

from .conftest import E2bStand

pytestmark = pytest.mark.component

NOBODY = 65534


def basic(user: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:".encode()).decode()}


def upload(e2b: E2bStand, sandbox: str, token: str, path: str, user: str, **headers: str) -> None:
    """An upload through a URL signed for `user` (no access token header), its status."""
    params = {"path": path, "signature": file_signature(token, path, "write", user, None)}
    if user:
        params["username"] = user
    r = e2b.client.post(
        "/e2b-envd/files",
        params=params,
        content=b"signed",
        headers={
            "E2b-Sandbox-Id": sandbox,
            "Content-Type": "application/octet-stream",
            **headers,
        },
    )
    assert r.status_code == 200, r.text


def test_a_url_signed_for_the_default_user_ignores_a_basic_header(e2b: E2bStand) -> None:
    sandbox, envd = e2b.create()
    token = envd["X-Access-Token"]
    path = str(e2b.scratch / "default")
    upload(e2b, sandbox, token, path, "", **basic("nobody"))
    # the default user here is root (the stand-in makes no `user`): the Basic user is not taken
    assert (e2b.scratch / "default").stat().st_uid == 0
    assert (e2b.scratch / "default").read_bytes() == b"signed"


def test_a_url_signed_for_a_user_acts_as_that_user_whatever_basic_says(e2b: E2bStand) -> None:
    sandbox, envd = e2b.create()
    path = str(e2b.scratch / "nobodys")
    upload(e2b, sandbox, envd["X-Access-Token"], path, "nobody", **basic("root"))
    assert (e2b.scratch / "nobodys").stat().st_uid == NOBODY


def test_the_access_token_header_still_takes_the_basic_user(e2b: E2bStand) -> None:
    _, envd = e2b.create()
    path = str(e2b.scratch / "headed")
    r = e2b.client.post(
        "/e2b-envd/files",
        params={"path": path},
        content=b"x",
        headers={**envd, "Content-Type": "application/octet-stream", **basic("nobody")},
    )
    assert r.status_code == 200, r.text
    assert (e2b.scratch / "headed").stat().st_uid == NOBODY
