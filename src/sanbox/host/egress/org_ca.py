"""The per-org CA of secret proxies: an ECDSA P-256 CA that the org's computers trust, and the
leaf certificates the egress proxy shows a guest for the hosts it intercepts. The CA's key never
enters a guest, a snapshot or an image: the control plane keeps it sealed in the store and hands
the proxy a `Minter`, which signs short-lived leaves in memory (seven days, renewed a day before
they end) and keeps at most `MAX_LEAVES` server contexts."""

from __future__ import annotations

import contextlib
import datetime as dt
import ssl
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_YEARS = 10
LEAF_DAYS = 7
RENEW_BEFORE = dt.timedelta(days=1)
MAX_LEAVES = 256
ALPN = ["http/1.1"]


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def new_ca(org: str) -> tuple[bytes, bytes]:
    """A new CA for `org`: its certificate and its private key, both PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Sanbox"),
        x509.NameAttribute(NameOID.COMMON_NAME, f"Sanbox egress CA of org {org}"[:64]),
    ])  # fmt: skip
    now = _now()
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=365 * CA_YEARS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )  # fmt: skip
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )  # fmt: skip
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


class Minter:
    """Server contexts for intercepted hosts, each with a leaf signed by the org's CA."""

    def __init__(self, ca_pem: bytes, ca_key_pem: bytes) -> None:
        self.ca_pem = ca_pem
        self._ca = x509.load_pem_x509_certificate(ca_pem)
        key = serialization.load_pem_private_key(ca_key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("the org CA's key is not an EC key")
        self._ca_key = key
        self._contexts: OrderedDict[str, tuple[dt.datetime, ssl.SSLContext]] = OrderedDict()
        self._lock = threading.Lock()

    def context(self, name: str) -> ssl.SSLContext:
        """A TLS server context presenting a certificate for `name` (ALPN: HTTP/1.1 only)."""
        with self._lock:
            held = self._contexts.get(name)
            if held is not None and held[0] - RENEW_BEFORE > _now():
                self._contexts.move_to_end(name)
                return held[1]
        ends, ctx = self._mint(name)
        with self._lock:
            self._contexts[name] = (ends, ctx)
            while len(self._contexts) > MAX_LEAVES:
                self._contexts.popitem(last=False)
        return ctx

    def _mint(self, name: str) -> tuple[dt.datetime, ssl.SSLContext]:
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        ends = now + dt.timedelta(days=LEAF_DAYS)
        ca_ski = self._ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name[:64])]))
            .issuer_name(self._ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(ends)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )  # fmt: skip
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
                critical=False,
            )
            .sign(self._ca_key, hashes.SHA256())
        )
        chain = cert.public_bytes(serialization.Encoding.PEM) + self.ca_pem
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )  # fmt: skip
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_alpn_protocols(ALPN)
        with tempfile.TemporaryDirectory(prefix="sbleaf") as folder:  # 0700; gone at once
            cert_file, key_file = Path(folder) / "leaf.pem", Path(folder) / "leaf.key"
            cert_file.write_bytes(chain)
            key_file.touch(mode=0o600)
            key_file.write_bytes(key_pem)
            ctx.load_cert_chain(cert_file, key_file)
        return ends, ctx


def upstream_context(ca_bundle: Path | None = None) -> ssl.SSLContext:
    """The proxy's own client context towards intercepted hosts: the system's trust store plus
    `ca_bundle`, hostnames checked, never relaxed."""
    ctx = ssl.create_default_context()
    if ca_bundle is not None:
        ctx.load_verify_locations(cafile=str(ca_bundle))
    ctx.check_hostname = True
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.set_alpn_protocols(ALPN)
    with contextlib.suppress(AttributeError):
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx
