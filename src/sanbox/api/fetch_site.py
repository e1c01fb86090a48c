"""What a browser says about who asked for a request (Fetch Metadata), read one way for the
console and the published ports: `Sec-Fetch-Site` is `same-origin` for the page's own requests
and `none` for a typed address or a bookmark; anything else is another page's doing, which a
cookie of the console or of a port must not serve unless it is a top-level navigation (a link
followed from elsewhere: `Sec-Fetch-Mode: navigate`, `Sec-Fetch-Dest: document`), never a
fetch, an image, a script or a frame. Browsers send these to HTTPS and localhost origins only."""

from __future__ import annotations

SAME_ORIGIN = frozenset({"same-origin", "none"})


def another_pages(site: str | None, mode: str | None, dest: str | None) -> bool:
    """Whether the request is another page's doing by its `Sec-Fetch-Site`, `-Mode` and `-Dest`
    headers, and no top-level navigation. A request that says nothing (no `Sec-Fetch-Site`: an
    older browser, a tool, plain HTTP) is not known to be."""
    if site is None or site.strip().lower() in SAME_ORIGIN:
        return False
    navigation = (mode or "").strip().lower() == "navigate"
    return not (navigation and (dest or "").strip().lower() == "document")
