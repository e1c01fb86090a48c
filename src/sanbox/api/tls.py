"""HTTPS for `sanbox server` on a wildcard name: the certificate the operator gives, or one
signed by a CA of the server's own, made on first use in `<data dir>/tls/` and kept there.

E2B's SDK reaches envd and `get_host()` URLs at `https://{port}-{sandboxID}.{domain}` and its
API at `https://api.{domain}`; published ports are `{port}-{name}.{org}.{domain}`. One
certificate for `{domain}` and `*.{domain}` covers the SDK's names (a wildcard covers one label);
the CA certificate (`ca.pem`) is what a client must trust (docs/e2b.md says how)."""

from __future__ import annotations

import datetime
from pathlib import Path

from cryptography import x509

from .. import pki


def wildcard(folder: Path, domain: str) -> tuple[Path, Path, Path]:
    """(CA certificate, certificate, key) for `domain` and `*.domain`, signed by the server's CA;
    made once per domain, renewed a month before it ends."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    host = domain.partition(":")[0].strip(".").lower()
    cert_path, key_path = folder / f"{host}.pem", folder / f"{host}.key"
    issuer = pki.ca(folder, "ca", "Sanbox server CA")
    now = datetime.datetime.now(datetime.UTC)
    if cert_path.exists() and key_path.exists():
        old = x509.load_pem_x509_certificate(cert_path.read_bytes())
        if old.not_valid_after_utc - now > datetime.timedelta(days=30):
            return folder / "ca.pem", cert_path, key_path
    key = pki.new_key()
    cert = pki.sign(issuer, key.public_key(), f"*.{host}", [host, f"*.{host}"], pki.SERVER)
    pki.write_key(key_path, key)
    pki.write_cert(cert_path, cert)
    return folder / "ca.pem", cert_path, key_path
