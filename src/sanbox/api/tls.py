"""HTTPS for `sanbox server` on a wildcard name: the certificate the operator gives, or one
signed by a CA of the server's own, made on first use in `<data dir>/tls/` and kept there.

E2B's SDK reaches envd and `get_host()` URLs at `https://{port}-{sandboxID}.{domain}` and its
API at `https://api.{domain}`; published ports are `{port}-{name}.{org}.{domain}`. One
certificate for `{domain}` and `*.{domain}` covers the SDK's names (a wildcard covers one label);
the CA certificate (`ca.pem`) is what a client must trust (docs/e2b.md says how)."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
LEAF_DAYS = 397  # what browsers accept for a leaf certificate


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _ca(folder: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert_path, key_path = folder / "ca.pem", folder / "ca.key"
    if cert_path.exists() and key_path.exists():
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return cert, key
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("Sanbox server CA"))
        .issuer_name(_name("Sanbox server CA"))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    _write_key(key_path, key)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def wildcard(folder: Path, domain: str) -> tuple[Path, Path, Path]:
    """(CA certificate, certificate, key) for `domain` and `*.domain`, signed by the server's CA;
    made once per domain, renewed a month before it ends."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    host = domain.partition(":")[0].strip(".").lower()
    cert_path, key_path = folder / f"{host}.pem", folder / f"{host}.key"
    ca_cert, ca_key = _ca(folder)
    now = datetime.datetime.now(datetime.UTC)
    if cert_path.exists() and key_path.exists():
        old = x509.load_pem_x509_certificate(cert_path.read_bytes())
        if old.not_valid_after_utc - now > datetime.timedelta(days=30):
            return folder / "ca.pem", cert_path, key_path
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName(host), x509.DNSName(f"*.{host}")]
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(f"*.{host}"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=LEAF_DAYS))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _write_key(key_path, key)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return folder / "ca.pem", cert_path, key_path
