"""The egress values that cross the link, as JSON, each checked and bounded on the way in: a
computer's allowlist (its rules), its secrets' handover (`Handover`: the injections with their
values and the org's CA, key included; bytes as base64) and the denials a host's gateway made.
A value out of bounds is refused whole (`ValueError`), never cut."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from typing import Any

from ...host.door import Denial, Handover, Injection, Policy

Json = dict[str, Any]

MAX_RULES = 256  # allow rules of one computer
MAX_RULE = 300  # characters of one rule (a host name is at most 253)
MAX_INJECTIONS = 32  # secrets bound to one computer that a host is handed (in a 1 MiB call)
MAX_HOSTS = 32  # hosts of one secret (`control/secrets.py` HOSTS_MAX)
MAX_HOST = 253
MAX_VALUE = 8192  # bytes of a secret's value (`control/secrets.py` VALUE_MAX)
MAX_FIELD = 1024  # bytes of a header name, template or placeholder
MAX_PEM = 16384  # bytes of the org CA's certificate or key
MAX_DENIALS = 64  # denials in one answer (the host's journal keeps 4096 answers)
MAX_REASON = 512
_COMPUTER_ID = re.compile(r"[a-z0-9_-]{1,64}")
_ORG_ID = re.compile(r"[A-Za-z0-9_-]{0,64}")


def computer_id_in(value: object) -> str:
    if not isinstance(value, str) or not _COMPUTER_ID.fullmatch(value):
        raise ValueError("computer_id: 1-64 of [a-z0-9_-]")
    return value


def org_id_in(value: object) -> str:
    if not isinstance(value, str) or not _ORG_ID.fullmatch(value):
        raise ValueError("org_id: 0-64 of [A-Za-z0-9_-]")
    return value


def rules_out(policy: Policy) -> list[str]:
    return policy.rules()


def rules_in(value: object) -> Policy:
    """A policy from its rules, each parsed again on this side (`PolicyError` is a ValueError)."""
    if not isinstance(value, list) or len(value) > MAX_RULES:
        raise ValueError(f"rules: a list of at most {MAX_RULES}")
    if not all(isinstance(r, str) and len(r) <= MAX_RULE for r in value):
        raise ValueError(f"rules: strings of at most {MAX_RULE} characters")
    return Policy.of(value)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _bytes_in(value: object, bound: int, what: str) -> bytes:
    if not isinstance(value, str) or len(value) > (bound + 2) // 3 * 4:
        raise ValueError(f"{what}: base64 of at most {bound} bytes")
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{what}: not base64") from None
    if len(data) > bound:
        raise ValueError(f"{what}: at most {bound} bytes")
    return data


def _optional_in(value: object, bound: int, what: str) -> bytes | None:
    return None if value is None else _bytes_in(value, bound, what)


def handover_out(handover: Handover | None) -> Json | None:
    if handover is None:
        return None
    return {
        "org_id": handover.org_id,
        "ca_pem": _b64(handover.ca_pem),
        "ca_key_pem": _b64(handover.ca_key_pem),
        "strict_placeholders": handover.strict_placeholders,
        "injections": [
            {
                "hosts": list(i.hosts),
                "header": None if i.header is None else _b64(i.header),
                "template": _b64(i.template),
                "placeholder": _b64(i.placeholder),
                "value": _b64(i.value),
                "placeholder_header": (
                    None if i.placeholder_header is None else _b64(i.placeholder_header)
                ),
                "any_header": i.any_header,
            }
            for i in handover.injections
        ],
    }


def handover_in(data: object) -> Handover | None:
    """A handover, every part checked (an `Injection` checks its own header and value). The
    errors name the field, never a value."""
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ValueError("secrets: an object or null")
    injections = data.get("injections")
    if not isinstance(injections, list) or not 1 <= len(injections) <= MAX_INJECTIONS:
        raise ValueError(f"secrets.injections: 1 to {MAX_INJECTIONS}")
    made = []
    for item in injections:
        if not isinstance(item, dict):
            raise ValueError("secrets.injections: objects")
        hosts = item.get("hosts")
        if not isinstance(hosts, list) or not 1 <= len(hosts) <= MAX_HOSTS:
            raise ValueError(f"secrets.injections.hosts: 1 to {MAX_HOSTS}")
        if not all(isinstance(h, str) and 0 < len(h) <= MAX_HOST for h in hosts):
            raise ValueError("secrets.injections.hosts: host names")
        try:
            made.append(
                Injection(
                    hosts=tuple(hosts),
                    header=_optional_in(item.get("header"), MAX_FIELD, "header"),
                    template=_bytes_in(item.get("template", ""), MAX_FIELD, "template"),
                    placeholder=_bytes_in(item.get("placeholder"), MAX_FIELD, "placeholder"),
                    value=_bytes_in(item.get("value"), MAX_VALUE, "value"),
                    placeholder_header=_optional_in(
                        item.get("placeholder_header"), MAX_FIELD, "placeholder_header"
                    ),
                    any_header=item.get("any_header") is True,
                )
            )
        except ValueError as exc:  # an Injection's own check says what, never the value
            raise ValueError(f"secrets.injections: {exc}") from None
    return Handover(
        org_id=org_id_in(data.get("org_id")),
        injections=tuple(made),
        ca_pem=_bytes_in(data.get("ca_pem"), MAX_PEM, "ca_pem"),
        ca_key_pem=_bytes_in(data.get("ca_key_pem"), MAX_PEM, "ca_key_pem"),
        strict_placeholders=data.get("strict_placeholders") is True,
    )


def handover_digest(wired: Json | None) -> str | None:
    """What names one handover in the host's report (so the control plane sees whether the host
    holds the secrets bound now) without carrying anything of it: a SHA-256 of its JSON."""
    if wired is None:
        return None
    text = json.dumps(wired, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(text).hexdigest()


def denial_out(computer_id: str, denial: Denial) -> Json:
    return {"computer_id": computer_id, **denial.data(), "quiet": denial.quiet}


def denial_in(data: object) -> tuple[str, Denial]:
    if not isinstance(data, dict):
        raise ValueError("a denial is an object")
    name, reason = data.get("name"), data.get("reason")
    if not isinstance(name, str) or not 0 < len(name) <= MAX_HOST:
        raise ValueError("denial.name: 1 to 253 characters")
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        raise ValueError(f"denial.reason: at most {MAX_REASON} characters")
    numbers = [data.get(k) for k in ("port", "repeats", "others")]
    counts = [n for n in numbers if isinstance(n, int) and 0 <= n < 1 << 31]
    if len(counts) != len(numbers):
        raise ValueError("denial: port, repeats and others are counts")
    quiet = data.get("quiet", 0.0)
    if not isinstance(quiet, int | float) or quiet < 0:
        raise ValueError("denial.quiet: seconds")
    port, repeats, others = counts
    return computer_id_in(data.get("computer_id")), Denial(
        name, port, reason, repeats, float(quiet), others
    )
