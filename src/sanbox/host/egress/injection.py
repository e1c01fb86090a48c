"""What a secret proxy adds to a request (sans-IO): for each secret bound to the computer whose
hosts match the request's, the configured header is overwritten with the rendered template (every
copy the guest sent is dropped first: the secret is never appended next to a guest's value), then
the secret's placeholder is replaced by its value in the headers its rule names, and nowhere
else: `placeholder_headers` (the rule's header; for a placeholder-only secret the header it names,
by default Authorization; any header only if the operator opts in). A placeholder in another
header, the request line or the body goes on as it is (`placeholder_refusal` refuses it, strict).

Host patterns match as the allowlist's do (`policy.py`): `api.openai.com` exactly, `*.example.com`
any name below example.com at any depth, not example.com itself. Values never show in a repr, and
are checked once so that no header built from them can fail later with the value in its error."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from .leak_scan import forms
from .sniff import TOKEN

Headers = list[tuple[bytes, bytes]]
FIELD_VALUE = re.compile(rb"[\x21-\x7e]+(?:[ \t]+[\x21-\x7e]+)*")  # as h11 checks it
PLACEHOLDER_HEADER = b"Authorization"  # where a placeholder-only secret goes, unless it names one
# headers that frame or route the request: never set by a secret, never rewritten
FRAMING = {
    b"host",
    b"content-length",
    b"transfer-encoding",
    b"connection",
    b"upgrade",
    b"te",
    b"trailer",
    b"keep-alive",
    b"proxy-connection",
}


@dataclass(frozen=True)
class Injection:
    """One bound secret: where it applies and how it goes into a request."""

    hosts: tuple[str, ...]  # `api.openai.com` or `*.example.com`
    header: bytes | None  # overwritten with `template`; None: placeholder replacement only
    template: bytes  # e.g. b"Bearer {value}" (unused without a header)
    placeholder: bytes  # what the guest holds instead of the value
    value: bytes = field(repr=False)
    placeholder_header: bytes | None = None  # placeholder-only: the header it may go in
    any_header: bool = False  # the operator's opt-in: the placeholder is replaced in any header
    # what betrays the value in a response (leak_scan.forms), worked out once
    forms: frozenset[bytes] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.placeholder) < 8:
            raise ValueError("a placeholder needs at least 8 bytes")
        rendered_ok = self.header is None or FIELD_VALUE.fullmatch(self.rendered)
        if not FIELD_VALUE.fullmatch(self.value) or not rendered_ok:
            raise ValueError("a secret value must be printable ASCII, without CR, LF or NUL")
        for header in (self.header, self.placeholder_header):
            if header is not None and (not TOKEN.fullmatch(header) or header.lower() in FRAMING):
                raise ValueError(f"{header!r} cannot carry a secret")
        object.__setattr__(self, "forms", frozenset(forms(self.value)))

    @property
    def rendered(self) -> bytes:
        return self.template.replace(b"{value}", self.value)

    @property
    def placeholder_headers(self) -> frozenset[bytes] | None:
        """The headers (lowercase) where the placeholder is replaced; None: any header."""
        if self.any_header:
            return None
        return frozenset({(self.header or self.placeholder_header or PLACEHOLDER_HEADER).lower()})

    def substitutes_in(self, header: bytes) -> bool:
        allowed = self.placeholder_headers
        lower = header.lower()
        return lower not in FRAMING and (allowed is None or lower in allowed)


def host_matches(pattern: str, name: str) -> bool:
    """`*.example.com` matches `a.b.example.com`, not `example.com`; others match exactly."""
    pattern, name = pattern.lower().rstrip("."), name.lower().rstrip(".")
    if pattern.startswith("*."):
        return name.endswith(pattern[1:])
    return pattern == name


def applies(injection: Injection, name: str) -> bool:
    return any(host_matches(pattern, name) for pattern in injection.hosts)


def inject(headers: Headers, name: str, injections: Sequence[Injection]) -> Headers:
    """`headers` of a request for `name` with the secrets that apply to it added."""
    live = [i for i in injections if applies(i, name)]
    out = list(headers)
    for injection in live:
        if injection.header is not None:
            drop = injection.header.lower()
            out = [(n, v) for n, v in out if n.lower() != drop]
            out.append((injection.header, injection.rendered))
    for injection in live:
        out = [(n, _substituted(injection, n, v)) for n, v in out]
    return out


def _substituted(injection: Injection, name: bytes, value: bytes) -> bytes:
    if injection.substitutes_in(name):
        return value.replace(injection.placeholder, injection.value)
    return value


def misplaced_placeholders(
    headers: Headers, name: str, injections: Sequence[Injection]
) -> list[tuple[Injection, bytes]]:
    """The secrets for `name` whose placeholder the request carries in a header it is not
    replaced in, with that header."""
    return [
        (i, n)
        for i in injections
        if applies(i, name)
        for n, v in headers
        if i.placeholder in v and not i.substitutes_in(n)
    ]


def foreign_placeholders(
    headers: Headers, name: str, injections: Sequence[Injection]
) -> list[Injection]:
    """The secrets whose placeholder the request carries but which do not apply to `name`."""
    return [
        i
        for i in injections
        if not applies(i, name) and any(i.placeholder in v for _, v in headers)
    ]


def placeholder_refusal(headers: Headers, name: str, injections: Sequence[Injection]) -> str | None:
    """Why a strict proxy refuses this request for `name` (None: it may go): it carries the
    placeholder of a secret for other hosts, or one for this host in a header its value does not
    go in."""
    foreign = foreign_placeholders(headers, name, injections)
    if foreign:
        return f"it carries the placeholder of a secret for {', '.join(foreign[0].hosts)}"
    misplaced = misplaced_placeholders(headers, name, injections)
    if misplaced:
        injection, header = misplaced[0]
        allowed = sorted(injection.placeholder_headers or ())
        where = ", ".join(h.decode() for h in allowed)
        return (
            f"it carries a secret's placeholder in {header.decode('latin-1')}, where it is not "
            f"replaced (only in {where})"
        )
    return None
