"""The pure parts of keys and audit: when a key stops working, why a key is refused, what an
audit record says about a request (never a key, a token or a query string), durations."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sanbox.api.auditing import action, audited, error_code, target
from sanbox.cli.grammars import parse_duration
from sanbox.cli.views import key_status
from sanbox.control.errors import InvalidRequestError
from sanbox.control.keys import expiry, refusal
from sanbox.sdk import ApiKey, NotFoundError, RateLimitedError
from sanbox.sdk.errors import error_from_response
from sanbox.store.models import ApiKey as KeyRow

pytestmark = pytest.mark.unit
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_expiry_from_seconds_or_a_time() -> None:
    assert expiry(NOW, None, None) is None
    assert expiry(NOW, 3600, None) == NOW + timedelta(hours=1)
    assert expiry(NOW, None, NOW + timedelta(days=1)) == NOW + timedelta(days=1)
    for seconds, at in (
        (60, NOW + timedelta(days=1)),
        (0, None),
        (-5, None),
        (None, NOW),
        (None, NOW - timedelta(seconds=1)),
        (None, datetime(2027, 1, 1)),
        (None, NOW + timedelta(days=11 * 365)),
    ):
        with pytest.raises(InvalidRequestError):
            expiry(NOW, seconds, at)


def test_a_revoked_or_expired_key_is_refused_with_what_to_do() -> None:
    key = KeyRow(id="key_1", prefix="sbk_abcdefgh", revoked_at=None, expires_at=None)
    assert refusal(key, NOW) is None
    key.expires_at = NOW + timedelta(seconds=1)
    assert refusal(key, NOW) is None
    key.expires_at = NOW
    why = refusal(key, NOW) or ""
    assert "expired" in why and "sanbox key create" in why and "sbk_abcdefgh" in why
    key.revoked_at = NOW
    why = refusal(key, NOW) or ""
    assert "revoked" in why and "new one" in why


class Route:
    path = "/v1/computers/{ref}/stop"


def scope(**kw: Any) -> dict[str, Any]:
    return {"type": "http", "method": "POST", "path": "/v1/computers/box/stop", **kw}


def test_what_is_audited() -> None:
    assert audited(scope())
    assert audited(scope(method="DELETE", path="/v1/keys/key_1"))
    assert not audited(scope(method="GET"))
    assert not audited(scope(method="HEAD")) and not audited(scope(method="OPTIONS"))
    assert not audited(scope(path="/openapi.json")) and not audited(scope(path="/v1x"))
    assert audited({"type": "websocket", "path": "/v1/computers/box/exec/stream"})
    assert not audited({"type": "lifespan"})


def test_the_action_is_the_route_template_and_the_target_its_parameters() -> None:
    s = scope(route=Route(), path_params={"ref": "box"})
    assert (action(s), target(s)) == ("POST /v1/computers/{ref}/stop", {"ref": "box"})
    ws = {"type": "websocket", "path": "/v1/computers/box/exec/stream"}
    assert action(ws) == "WEBSOCKET /v1/computers/box/exec/stream"


def test_no_key_reaches_a_record() -> None:
    key = "sbk_" + "S3cr3t" * 7
    s = scope(
        path=f"/v1/computers/{key}/stop",
        route=Route(),
        path_params={"ref": key},
        query_string=f"token={key}".encode(),
    )
    assert key not in repr((action(s), target(s)))
    unmatched = scope(path=f"/v1/nowhere/{key}")
    assert key not in action(unmatched) and action(unmatched).startswith("POST /v1/nowhere/")
    assert len(action(scope(path="/v1/" + "x" * 1000))) == 200


def test_the_error_code_comes_from_the_error_body() -> None:
    assert error_code(b'{"error": {"code": "computer_not_found", "message": "no"}}') == (
        "computer_not_found"
    )
    for body in (b"", b"not json", b"[]", b'{"error": "x"}', b'{"error": {"code": 5}}'):
        assert error_code(body) is None


def test_durations() -> None:
    assert [parse_duration(d) for d in ("90", "90s", "15m", "12h", "30d", "2w", "1d12h")] == [
        90,
        90,
        900,
        43200,
        30 * 86400,
        14 * 86400,
        36 * 3600,
    ]
    for bad in ("", "0", "0s", "1y", "-1h", "h", "1.5h", "1 d"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_key_status_as_the_cli_shows_it() -> None:
    assert key_status(ApiKey("key_1", "default")) == "active"
    assert key_status(ApiKey("key_1", "default", revoked_at="2026-01-01T00:00:00Z")) == "revoked"
    soon = ApiKey("key_1", "default", expires_at="2026-11-30T12:00:01+00:00")
    assert key_status(soon, NOW) == "active"
    assert key_status(soon, NOW + timedelta(seconds=1)) == "expired"


def test_the_sdk_maps_the_new_codes() -> None:
    refused = error_from_response(429, b'{"error": {"code": "too_many_failures", "message": "m"}}')
    assert type(refused) is RateLimitedError and refused.status == 429
    for code in ("key_not_found", "org_not_found"):
        found = error_from_response(
            404, json.dumps({"error": {"code": code, "message": "m"}}).encode()
        )
        assert type(found) is NotFoundError and found.code == code
