"""Certificate authorities of Sanbox's own and the certificates they sign (ECDSA P-256): the
server's HTTPS CA (api/tls.py) and the fleet's two CAs (fleet/link/pki.py). A CA is a
certificate and a key in a folder, made on first use, its key mode 0600. Two processes may
make the same pair at once (API nodes sharing a folder, a CLI command beside the server): the
one that makes it holds the folder's lock (`making`), and each file appears whole (written
beside it, then renamed), so no one reads a key that does not match its certificate."""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import ipaddress
import os
from collections.abc import Iterator
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
LEAF_DAYS = 397  # what browsers accept for a leaf certificate

SERVER = ExtendedKeyUsageOID.SERVER_AUTH
CLIENT = ExtendedKeyUsageOID.CLIENT_AUTH


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_whole(path: Path, data: bytes, mode: int) -> None:
    """`data` at `path` in one step: written beside it, then renamed over it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    _write_whole(path, data, 0o600)


def write_cert(path: Path, cert: x509.Certificate) -> None:
    _write_whole(path, cert.public_bytes(serialization.Encoding.PEM), 0o644)  # as write_bytes


@contextlib.contextmanager
def making(folder: Path) -> Iterator[None]:
    """The folder's lock, held while a pair is made on first use (look again inside: another
    process may have made it meanwhile). Not re-entrant: make nothing else inside."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(folder / ".making.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def load_key(path: Path) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(path.read_bytes(), None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{path} is not an EC private key")
    return key


def name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


Issuer = tuple[x509.Certificate, ec.EllipticCurvePrivateKey]


def ca(folder: Path, stem: str, subject: str) -> Issuer:
    """The CA `<folder>/<stem>.pem` + `.key`, made on first use."""
    cert_path, key_path = folder / f"{stem}.pem", folder / f"{stem}.key"
    if cert_path.exists() and key_path.exists():
        return x509.load_pem_x509_certificate(cert_path.read_bytes()), load_key(key_path)
    with making(folder):
        if cert_path.exists() and key_path.exists():  # made by another process meanwhile
            return x509.load_pem_x509_certificate(cert_path.read_bytes()), load_key(key_path)
        return _new_ca(cert_path, key_path, subject)


def _new_ca(cert_path: Path, key_path: Path, subject: str) -> Issuer:
    key = new_key()
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name(subject))
        .issuer_name(name(subject))
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
    write_key(key_path, key)
    write_cert(cert_path, cert)
    return cert, key


def _alt(value: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(value))
    except ValueError:
        return x509.DNSName(value)


def sign(
    issuer: Issuer,
    public_key: ec.EllipticCurvePublicKey,
    common: str,
    names: list[str],
    usage: x509.ObjectIdentifier,
    days: int = LEAF_DAYS,
) -> x509.Certificate:
    """A leaf certificate for `public_key`: `common` as its subject, `names` (DNS names or IP
    addresses) as its alternative names, good for `usage` alone (server or client)."""
    ca_cert, ca_key = issuer
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name(common))
        .issuer_name(ca_cert.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if names:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([_alt(n) for n in names]), critical=False
        )
    return builder.sign(ca_key, hashes.SHA256())
