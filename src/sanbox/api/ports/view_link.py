"""View links: a URL that opens one published port view-only, for whoever holds it, and nothing
else. ``?sanbox_view_token=KEY_ID.EXPIRES.MAC`` (`access.VIEW_TOKEN_PARAM`) where the MAC
(HMAC-SHA256 under a key of the server's own, not the port cookie's) covers the computer, its org,
the port and its publication (a port published again is another publication), the key that made
the link, the expiry and the mode ``view``. The token is no API key: traded at the port's URL it
gives the view-only port cookie (`access`), expiring no later than the link. The link is checked
on every request against the current publication and its key, as cookies are: it stops working
once the computer is deleted, the port unpublished, or the key that made it revoked or expired.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass

from .access import VIEW, mac_matches, signed_fields

VIEW_LINK_TTL = 3600  # seconds, when the caller names none
VIEW_LINK_MIN_TTL = 60
VIEW_LINK_MAX_TTL = 7 * 86400
MAX_TOKEN_CHARS = 256  # a longer value is refused unread
PURPOSE = "port-view-link"  # the derived key's purpose (`host.secret.derived_key`)


@dataclass(frozen=True)
class LinkTarget:
    """What a view link opens: one publication of one port of one computer of one org."""

    computer_id: str
    org_id: str
    port: int
    publication: str  # the publication's id (`control.network.publication`)


NOWHERE = LinkTarget("", "", 0, "")  # checked against when the URL names no published port


class ViewLinkSigner:
    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def _mac(self, target: LinkTarget, key_id: str, expires: int) -> str:
        t = target
        fields = (t.computer_id, t.org_id, t.port, t.publication, key_id, expires, VIEW)
        msg = "view-link|" + "|".join(str(f) for f in fields)
        return hmac.new(self._secret, msg.encode(), hashlib.sha256).hexdigest()

    def mint(
        self, target: LinkTarget, key_id: str, ttl: int, now: float | None = None
    ) -> tuple[str, int]:
        """The token and its expiry (Unix seconds)."""
        if not VIEW_LINK_MIN_TTL <= ttl <= VIEW_LINK_MAX_TTL:
            raise ValueError(f"a view link lasts {VIEW_LINK_MIN_TTL}..{VIEW_LINK_MAX_TTL} s")
        if not key_id or "." in key_id:
            raise ValueError(f"a key id without dots, not {key_id!r}")
        expires = int(now if now is not None else time.time()) + ttl
        return f"{key_id}.{expires}.{self._mac(target, key_id, expires)}", expires

    def verify(
        self, token: str, target: LinkTarget, now: float | None = None
    ) -> tuple[str, int] | None:
        """The key id and expiry the token was made with, or None if it does not open `target`
        here and now. The MAC is compared whatever else is wrong, so every refusal takes the
        same time."""
        if len(token) > MAX_TOKEN_CHARS:
            token = ""
        key_id, _, rest = token.partition(".")
        expires_text, _, mac = rest.partition(".")
        well_formed, expires = signed_fields(key_id, expires_text, mac)
        good = mac_matches(mac, self._mac(target, key_id, expires))
        if not (well_formed and good):
            return None
        if expires < (now if now is not None else time.time()):
            return None
        return key_id, expires
