"""A port cookie's request must come from the port's own origin; view-only cookies are signed as
such and cannot be turned into full ones."""

from __future__ import annotations

import pytest

from sanbox.api.ports.access import FULL, VIEW, CookieSigner
from sanbox.api.ports.origin import check_origin, same_origin
from sanbox.control.errors import ForbiddenError

pytestmark = pytest.mark.unit
HOST = "8080-demo.acme.example.com"


def test_same_origin_is_scheme_host_and_port() -> None:
    assert same_origin(f"https://{HOST}", "https", HOST)
    assert same_origin(f"https://{HOST}:443", "https", HOST)
    assert same_origin(f"http://{HOST}:7070", "http", f"{HOST}:7070")
    assert not same_origin(f"http://{HOST}", "https", HOST)
    assert not same_origin("https://8081-demo.acme.example.com", "https", HOST)
    assert not same_origin("https://8080-demo.other.example.com", "https", HOST)
    assert not same_origin("null", "https", HOST)
    assert not same_origin(f"https://{HOST}/path", "https", HOST)
    assert not same_origin(f"https://{HOST}.evil.com", "https", HOST)


def _scope(kind: str, method: str, origin: str | None, **fetch: str) -> dict[str, object]:
    headers = [(b"host", HOST.encode())] + ([(b"origin", origin.encode())] if origin else [])
    headers += [(f"sec-fetch-{k}".encode(), v.encode()) for k, v in fetch.items()]
    return {"type": kind, "method": method, "headers": headers}


def test_check_origin() -> None:
    check_origin(_scope("http", "GET", None), "https")  # a page load (or no browser's)
    check_origin(_scope("http", "POST", None), "https")  # no browser sends a POST without it
    check_origin(_scope("http", "POST", f"https://{HOST}"), "https")
    check_origin(_scope("http", "GET", f"https://{HOST}"), "https")
    check_origin(_scope("websocket", "GET", f"https://{HOST}"), "https")
    for scope in (
        _scope("http", "POST", "https://evil.example"),
        _scope("http", "DELETE", "null"),
        _scope("http", "GET", "https://8080-other.evil.example.com"),  # a script's fetch
        _scope("http", "HEAD", "https://evil.example"),
        _scope("websocket", "GET", "https://evil.example"),
        _scope("websocket", "GET", None),  # a WebSocket must say where it comes from
    ):
        with pytest.raises(ForbiddenError) as exc:
            check_origin(scope, "https")
        assert exc.value.code == "cross_origin"


def test_another_port_s_page_reaches_this_one_by_a_followed_link_only() -> None:
    """Ports share a site, so the Strict cookie goes with another port's page's requests: an
    image, a script, a frame or a no-cors fetch from it (no Origin) is told apart by
    `Sec-Fetch-Site`; a link followed to this page (a top-level navigation) still opens it."""
    own = ("same-origin", "none")
    for site in own:
        check_origin(_scope("http", "GET", None, site=site, mode="no-cors", dest="image"), "https")
    for site in ("same-site", "cross-site"):
        navigation = _scope("http", "GET", None, site=site, mode="navigate", dest="document")
        check_origin(navigation, "https")
        for mode, dest in (("no-cors", "image"), ("no-cors", "script"), ("navigate", "iframe")):
            scope = _scope("http", "GET", None, site=site, mode=mode, dest=dest)
            with pytest.raises(ForbiddenError) as exc:
                check_origin(scope, "https")
            assert exc.value.code == "cross_origin"


def test_a_view_cookie_cannot_be_made_a_full_one_nor_outlive_its_publication() -> None:
    signer = CookieSigner(b"k" * 32)
    view = signer.mint("cmp_1", 8080, "pub_1", "key_1", VIEW, now=100)
    assert signer.verify(view, "cmp_1", 8080, "pub_1", now=100) == ("key_1", VIEW)
    assert signer.verify(view.replace(".view.", ".full."), "cmp_1", 8080, "pub_1", now=100) is None
    full = signer.mint("cmp_1", 8080, "pub_1", "key_1", FULL, now=100)
    assert signer.verify(full, "cmp_1", 8080, "pub_1", now=100) == ("key_1", FULL)
    assert signer.verify(full, "cmp_2", 8080, "pub_1", now=100) is None
    assert signer.verify(full, "cmp_1", 8080, "pub_2", now=100) is None  # published again
    assert signer.verify(full, "cmp_1", 8080, "pub_1", now=100 + signer.ttl + 1) is None
    assert signer.verify("garbage", "cmp_1", 8080, "pub_1", now=100) is None


def test_a_cookie_expires_no_later_than_asked_and_odd_values_open_nothing() -> None:
    signer = CookieSigner(b"k" * 32)
    capped = signer.mint("cmp_1", 8080, "pub_1", "key_1", VIEW, now=100, not_after=160)
    assert signer.verify(capped, "cmp_1", 8080, "pub_1", now=160) == ("key_1", VIEW)
    assert signer.verify(capped, "cmp_1", 8080, "pub_1", now=161) is None
    later = signer.mint("cmp_1", 8080, "pub_1", "key_1", VIEW, now=100, not_after=10**9)
    assert later.split(".")[1] == str(100 + signer.ttl)  # never longer than the cookie's own
    mac = later.rsplit(".", 1)[1]
    for odd in (f"key_1.{'9' * 5000}.view.{mac}", f"key_1.160.view.{mac}é", "é.é.é.é"):
        assert signer.verify(odd, "cmp_1", 8080, "pub_1", now=100) is None
