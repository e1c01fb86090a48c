"""What keeps a secret's value from coming back to the guest (sans-IO): the secret proxy feeds a
`LeakScanner` each intercepted response's head and then its body, and relays only what the scanner
releases. A value is looked for as it is and in the encodings an upstream echoes it in: base64 (at
each of the three alignments, so `user:<value>` in a Basic header is caught), base64url,
percent-encoding and JSON string escaping (with `/` and `+` escaped too, as PHP and .NET do).

A body streams: the scanner holds back the end of what it was fed when that end could be the
start of a value (the longest suffix that is a proper prefix of one), so a value split across
chunks is caught whole and never half relayed; a chunk that ends elsewhere goes on at once (a
stream of events is not delayed). Looking is `bytes.find` per form over the held bytes and the
new chunk, no Python loop per byte. Forms shorter than `MIN_FORM` bytes are not looked for: they
would match ordinary text."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

MIN_FORM = 8  # bytes: a shorter form of a value is not looked for
_NET = {"\\": "\\\\", **{c: f"\\u{ord(c):04X}" for c in "\"+<>&'`"}}


def _lower(hexes: re.Match[str]) -> str:
    return hexes.group(0).lower()


LEAK_REASON = "the response carries a secret's value: it is not relayed"
Headers = Iterable[tuple[bytes, bytes]]


def _base64_cores(value: bytes) -> list[bytes]:
    """The part of base64(x + value + y) that depends on `value` only, for each length of x
    modulo 3 (a character holds 6 bits: those that hold a bit of x or y are cut)."""
    out = []
    for shift in range(3):
        text = base64.b64encode(b"\0" * shift + value)
        start = (shift * 4 + 2) // 3  # ceil(8 * shift / 6)
        end = (shift + len(value)) * 4 // 3  # floor(8 * (shift + len) / 6)
        out.append(text[start:end])
    return out


def forms(value: bytes) -> set[bytes]:
    """The byte strings that betray `value` in a response."""
    cores = _base64_cores(value)
    found = {value, *cores}
    found.update(c.replace(b"+", b"-").replace(b"/", b"_") for c in cores)
    text = value.decode("latin-1")
    found.add(quote(text, safe="").encode())
    found.add(quote_plus(text, safe="").encode())
    escaped = json.dumps(text)[1:-1]
    found.add(escaped.encode())
    found.add(escaped.replace("/", "\\/").encode())  # PHP's json_encode escapes the slash
    net = "".join(_NET.get(c, c) for c in text)  # .NET's System.Text.Json: HTML's, + and "
    found.update({net.encode(), re.sub(r"\\u00[0-9A-F]{2}", _lower, net).encode()})
    return {f for f in found if len(f) >= MIN_FORM}


class LeakScanner:
    """Feed it a response: `head` its status line's reason and headers, `feed` each body chunk
    (it answers what may go to the guest now, or None: a value is in it), `finish` at its end
    (the bytes still held). One scanner per response, or per raw stream after a 101."""

    def __init__(self, values: Iterable[bytes] = (), *, known: Iterable[bytes] = ()) -> None:
        """Look for `values` in their forms, and for forms `known` already (an `Injection`'s,
        worked out once when it is made instead of for every response)."""
        self._forms = sorted({*known, *(f for v in values for f in forms(v))}, key=len)
        self._held = b""

    @property
    def idle(self) -> bool:
        """There is nothing to look for (no value applies)."""
        return not self._forms

    def found_in(self, data: bytes) -> bool:
        return any(data.find(f) >= 0 for f in self._forms)

    def head(self, reason: bytes, headers: Headers) -> bool:
        """True if the head carries a value (in a header's name or value, or the reason)."""
        if not self._forms:
            return False
        return self.found_in(b"\n".join([reason, *(n + b": " + v for n, v in headers)]))

    def feed(self, data: bytes) -> bytes | None:
        """What of `data` (after what was held) may go on now; None if a value is in it."""
        if not self._forms:
            return data
        data = self._held + data if self._held else data
        if self.found_in(data):
            self._held = b""
            return None
        keep = self._partial(data)
        self._held = data[len(data) - keep :] if keep else b""
        return data[: len(data) - keep] if keep else data

    def finish(self) -> bytes:
        """The bytes still held at the end of the body (no value can complete them now)."""
        held, self._held = self._held, b""
        return held

    def _partial(self, data: bytes) -> int:
        """The length of the longest suffix of `data` that is a proper prefix of some form."""
        longest = 0
        for form in self._forms:
            window = min(len(form) - 1, len(data))
            if window <= longest:
                continue
            first, tail_start = form[0], len(data) - window
            at = data.find(first, tail_start)
            while at >= 0 and len(data) - at > longest:
                if form.startswith(data[at:]):
                    longest = len(data) - at
                    break
                at = data.find(first, at + 1)
        return longest
