"""Pool requests are checked before anything is kept: an unknown template is not found, a size
out of range or a stray field refused; a pool of size 0 holds nothing and lists as full.
(Pools handing out real computers: tests/vm/test_pools.py.)"""

from __future__ import annotations

import pytest

from .conftest import Server
from .test_api_computers import error

pytestmark = pytest.mark.component


@pytest.mark.parametrize(
    ("template", "body", "expected"),
    [
        ("nope", {"size": 1}, (404, "template_not_found")),
        ("base", {"size": -1}, (422, "validation_error")),
        ("base", {"size": 33}, (422, "validation_error")),
        ("base", {"size": 1, "extra": True}, (422, "validation_error")),
        ("Not A Name", {"size": 1}, (422, "invalid_name")),
    ],
)
def test_bad_pool_requests_keep_nothing(
    server: Server, template: str, body: dict[str, object], expected: tuple[int, str]
) -> None:
    r = server.client.put(f"/v1/pools/{template}", json=body, headers=server.headers())
    assert error(r) == expected, r.text
    assert server.client.get("/v1/pools", headers=server.headers()).json() == {"pools": []}


def test_an_empty_pool_is_listed_and_hides_nothing(server: Server) -> None:
    r = server.client.put("/v1/pools/base", json={"size": 0}, headers=server.headers())
    assert r.status_code == 200, r.text
    counts = {"ready": 0, "starting": 0, "unavailable": 0}
    assert r.json() == {"template": "base", "size": 0, **counts, "refill": "full"}
    pools = server.client.get("/v1/pools", headers=server.headers()).json()["pools"]
    assert [p["template"] for p in pools] == ["base"]
    computers = server.client.get("/v1/computers", headers=server.headers()).json()
    assert computers["computers"] == []
