"""A host joining the fleet (docs/fleet.md): a host-admin makes a one-time token for a region
(`make_token`; only its SHA-256 is kept); the host sends it with a certificate request for its
own key (the key never leaves the host) and what it is; `join` takes the token (used once, in one
statement, before its end), signs the host's server certificate with the host CA and registers
the host (a new epoch). The answer: the certificate, and the control CA's certificate that the
host must require of its callers.

An answer lost on its way (a dropped link, a timeout) would leave the host locked out until a
host-admin made a new token: the same host asking again with the same token and the same key
(the CLI keeps its key until it has the answer) before the token's end is given the same answer
again (`answered_again`), with nothing registered or signed anew. Anyone replaying the request
gets only that answer, which is public (a certificate for a key only the host holds, the
control CA's certificate, the host's lease), and changes nothing: the host's certificate is not
replaced, so not revoked."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from sqlalchemy import select, update

from ..control.errors import ForbiddenError, InvalidRequestError
from ..store import Database
from ..store.fleet_models import HostRow, JoinTokenRow
from ..store.models import utcnow
from ..store.repo import new_id
from . import clock
from .hosts import RETIRED, Hosts, HostSpec, Lease
from .link.pki import IDENTITY_SUFFIX, FleetCAs, fingerprint, identity_name

TOKEN_TTL = 3600.0
MAX_TTL = 7 * 86400.0
MAX_ADDRESSES = 8
MAX_CSR = 8192  # bytes of PEM


class JoinRefusedError(ForbiddenError):
    code = "join_refused"


@dataclass(frozen=True)
class Joined:
    lease: Lease
    certificate: str  # PEM, the host's server certificate
    control_ca: str  # PEM, what the host requires of its callers


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def make_token(
    db: Database, region: str, ttl: float = TOKEN_TTL, host_name: str | None = None
) -> str:
    """A one-time join token for a host of `region`, good for `ttl` seconds: for a new host, or
    with `host_name` for that host only (the one way to join again as a host already known)."""
    if not 0 < ttl <= MAX_TTL:
        raise InvalidRequestError(f"a join token lasts 1 s to {MAX_TTL:.0f} s", "invalid_ttl")
    token = "sbj_" + secrets.token_urlsafe(32)
    now = utcnow()
    with db.session() as s:
        s.add(
            JoinTokenRow(
                id=new_id("jtk_"),
                token_sha256=_digest(token),
                region=region,
                created_at=now,
                expires_at=now + timedelta(seconds=ttl),
                host_name=host_name,
            )
        )
        s.commit()
    return token


def _take(db: Database, token: str, host_name: str, region: str) -> None:
    """Use the token: once, before its end, for its region; a host name already known only
    with a token made for it (any token would otherwise take over a live host's name, its
    address and the secrets its computers' egress is handed)."""
    t, h = JoinTokenRow.__table__.c, HostRow.__table__.c
    with db.engine.begin() as conn:
        bound = conn.execute(
            select(t.host_name).where(t.token_sha256 == _digest(token), t.used_at.is_(None))
        ).one_or_none()
        if bound is not None and bound.host_name not in (None, host_name):
            raise JoinRefusedError(f"the join token is for host {bound.host_name}, not {host_name}")
        known = conn.execute(select(h.id).where(h.name == host_name)).first() is not None
        if bound is not None and bound.host_name is None and known:
            raise JoinRefusedError(
                f"host {host_name} is known already: joining again as it takes a token made "
                f"for it (sanbox host token --region {region} --host {host_name})"
            )
        taken = conn.execute(
            update(JoinTokenRow)
            .where(
                t.token_sha256 == _digest(token),
                t.used_at.is_(None),
                t.expires_at > clock.now(conn.dialect),
                t.region == region,
            )
            .values(used_at=clock.now(conn.dialect), host_name=host_name)
            .returning(t.id)
        ).scalar()
    if taken is None:
        raise JoinRefusedError(
            f"the join token is unknown, used, expired or not for region {region}: "
            "ask a host-admin for a new one (sanbox host token)"
        )


def _public_key(csr_pem: str) -> ec.EllipticCurvePublicKey:
    if len(csr_pem) > MAX_CSR:
        raise InvalidRequestError("the certificate request is too large", "invalid_csr")
    try:
        csr = x509.load_pem_x509_csr(csr_pem.encode())
    except ValueError as exc:
        raise InvalidRequestError(f"not a PEM certificate request: {exc}", "invalid_csr") from exc
    key = csr.public_key()
    if not csr.is_signature_valid or not isinstance(key, ec.EllipticCurvePublicKey):
        raise InvalidRequestError("the request must be an EC key's, signed by it", "invalid_csr")
    return key


def _check_addresses(addresses: list[str]) -> None:
    """Names and IPs a host's certificate may carry: no wildcard (it would match every name under
    it) and no host's identity name (`identity_name`: a host is named by the control plane)."""
    if not 1 <= len(addresses) <= MAX_ADDRESSES or any(len(a) > 253 for a in addresses):
        raise InvalidRequestError(f"1 to {MAX_ADDRESSES} addresses", "invalid_addresses")
    for address in addresses:
        if "*" in address or address.lower().rstrip(".").endswith(IDENTITY_SUFFIX):
            raise InvalidRequestError(
                f"{address!r} cannot be a host's address: name the host's own DNS names or IPs",
                "invalid_addresses",
            )


def _no_address_of_a_legacy_host(db: Database, name: str, addresses: list[str]) -> None:
    """No address of a host that is still checked by its address (it joined before its name was
    signed: `identity_bound` false): a certificate for it would pass as that host's."""
    with db.session() as s:
        rows = s.execute(
            select(HostRow.name, HostRow.address).where(
                HostRow.identity_bound.is_(False), HostRow.state != RETIRED, HostRow.name != name
            )
        ).all()
    held = {a.rpartition(":")[0].strip("[]").lower().rstrip("."): host for host, a in rows}
    for address in addresses:
        if (other := held.get(address.strip("[]").lower().rstrip("."))) is not None:
            raise InvalidRequestError(
                f"{address!r} is host {other}'s address, which is checked by address until it "
                f"joins again (sanbox host token --host {other}): join {other} again first",
                "invalid_addresses",
            )


def answered_again(
    db: Database,
    cas: FleetCAs,
    token: str,
    spec: HostSpec,
    addresses: list[str],
    key: ec.EllipticCurvePublicKey,
) -> Joined | None:
    """The answer the token's join was given, if this is that join asked again: the token used
    by this host name in this region and not at its end, the certificate given then for this
    key and these addresses, still the one the host's record pins (not joined again since), and
    the host where the join registered it (its address and port, region, driver). None
    otherwise (the request is then taken as a new join, and refused as a used token)."""
    t, h = JoinTokenRow.__table__.c, HostRow.__table__.c
    with db.engine.connect() as conn:
        used = conn.execute(
            select(t.certificate).where(
                t.token_sha256 == _digest(token),
                t.used_at.is_not(None),
                t.expires_at > clock.now(conn.dialect),
                t.host_name == spec.name,
                t.region == spec.region,
            )
        ).one_or_none()
        if used is None or used.certificate is None:
            return None
        cert = x509.load_pem_x509_certificate(used.certificate.encode())
        host = conn.execute(
            select(
                h.id, h.epoch, h.lease_until, h.cert_sha256, h.address, h.hypervisor, h.accel
            ).where(h.name == spec.name)
        ).one_or_none()
    if (
        host is None
        or host.cert_sha256 != fingerprint(cert)
        or _der(cert.public_key()) != _der(key)
    ):
        return None
    if (host.address, host.hypervisor, host.accel) != (spec.address, spec.hypervisor, spec.accel):
        return None  # another port, say: not the join that was made
    signed = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    names = {str(v) for v in signed.get_values_for_type(x509.DNSName)}
    names |= {str(v) for v in signed.get_values_for_type(x509.IPAddress)}
    if names != {*addresses, identity_name(spec.name)}:
        return None
    lease = Lease(host.id, host.epoch, host.lease_until)
    return Joined(lease, used.certificate, cas.control_ca_pem())


def _der(key: object) -> bytes:
    if not isinstance(key, ec.EllipticCurvePublicKey):
        return b""
    return key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def join(
    db: Database,
    cas: FleetCAs,
    token: str,
    spec: HostSpec,
    addresses: list[str],
    csr_pem: str,
) -> Joined:
    """Admit a host: its token taken (once), its request checked, its certificate signed for
    `addresses`, the host registered in the token's region (a host of another region is
    refused). Nothing is written if the request is bad."""
    _check_addresses(addresses)
    _no_address_of_a_legacy_host(db, spec.name, addresses)
    key = _public_key(csr_pem)
    if (again := answered_again(db, cas, token, spec, addresses, key)) is not None:
        return again
    _take(db, token, spec.name, spec.region)
    lease = Hosts(db).register(spec)
    cert, control_ca = cas.sign_host(spec.name, addresses, key)
    pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    with db.session() as s:  # its certificate names it, and no earlier one is taken from now on
        s.execute(
            update(HostRow)
            .where(HostRow.name == spec.name)
            .values(identity_bound=True, cert_sha256=fingerprint(cert))
        )
        s.execute(
            update(JoinTokenRow)
            .where(JoinTokenRow.token_sha256 == _digest(token))
            .values(certificate=pem)
        )
    return Joined(lease, pem, control_ca.read_text())
