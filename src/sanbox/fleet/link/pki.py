"""The fleet's certificates: two CAs of the control plane's own, signing apart so that neither
side can act as the other. The host CA signs each host agent's server certificate; the control
CA signs the control plane's client certificate. A host agent accepts only clients the control
CA signed; the control plane trusts only servers the host CA signed. Both CAs' keys stay with
the control plane (`<home>/fleet/`); a host holds its own key, its certificate and the control
CA's certificate (`<host data dir>/host/fleet/`)."""

from __future__ import annotations

import hashlib
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from ... import pki

HOST_CA = "host-ca"
CONTROL_CA = "control-ca"
IDENTITY_SUFFIX = ".hosts.sanbox.invalid"  # `.invalid` is no name DNS can ever answer for


def identity_name(host: str) -> str:
    """The name a host's certificate carries for the host itself, and that the control plane
    checks when it dials the host (whatever address it dials): another host's certificate, even
    one signed for the same address, does not carry it."""
    return f"{host}{IDENTITY_SUFFIX}"


@dataclass(frozen=True)
class Identity:
    """A certificate, its key, and the CA certificate the other side must be signed by."""

    cert: Path
    key: Path
    peer_ca: Path


class FleetCAs:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def host_ca(self) -> pki.Issuer:
        return pki.ca(self.folder, HOST_CA, "Sanbox fleet host CA")

    def control_ca(self) -> pki.Issuer:
        return pki.ca(self.folder, CONTROL_CA, "Sanbox fleet control CA")

    def control_ca_pem(self) -> str:
        """The control CA's certificate (made on first use): what a host requires of callers."""
        self.control_ca()
        return (self.folder / f"{CONTROL_CA}.pem").read_text()

    def control_identity(self) -> Identity:
        """The control plane's client certificate (made on first use) and the host CA."""
        self.host_ca()
        cert, key = self.folder / "control.pem", self.folder / "control.key"
        if not (cert.exists() and key.exists()):
            issuer = self.control_ca()  # made (under the lock) before the lock below is held
            with pki.making(self.folder):
                if not (cert.exists() and key.exists()):  # or another process made them
                    private = pki.new_key()
                    signed = pki.sign(
                        issuer, private.public_key(), "sanbox control plane", [], pki.CLIENT
                    )
                    pki.write_key(key, private)
                    pki.write_cert(cert, signed)
        return Identity(cert, key, self.folder / f"{HOST_CA}.pem")

    def sign_host(
        self, name: str, addresses: list[str], public_key: ec.EllipticCurvePublicKey
    ) -> tuple[x509.Certificate, Path]:
        """A host agent's server certificate for its `addresses` (DNS names or IPs) and its own
        `identity_name`, and the control CA's certificate it must require of its clients."""
        names = [*addresses, identity_name(name)]
        cert = pki.sign(self.host_ca(), public_key, f"sanbox host {name}", names, pki.SERVER)
        self.control_ca()
        return cert, self.folder / f"{CONTROL_CA}.pem"


def host_identity(folder: Path) -> Identity:
    return Identity(folder / "host.pem", folder / "host.key", folder / f"{CONTROL_CA}.pem")


def server_tls(me: Identity) -> ssl.SSLContext:
    """A host agent's side: its certificate, a client certificate the control CA signed
    required of every connection."""
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(me.peer_ca))
    tls.load_cert_chain(str(me.cert), str(me.key))
    tls.verify_mode = ssl.CERT_REQUIRED
    tls.minimum_version = ssl.TLSVersion.TLSv1_3
    return tls


def fingerprint(cert: x509.Certificate) -> str:
    """The SHA-256 of a certificate's DER, in hex: what a host's record pins (`client_tls`)."""
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()


def client_tls(me: Identity, pinned: str | None = None) -> ssl.SSLContext:
    """The control plane's side: hosts' certificates checked against the host CA (and the name
    asked for: a host's `identity_name`, see `HostLink`), its own certificate shown. `pinned`:
    the fingerprint of the one certificate the host may show, the last one signed for it, so a
    certificate of its earlier joins (a stolen key's) is refused though the CA signed it; checked
    as the handshake ends, before a byte of a request goes (asyncio and anyio's TLS, httpx's
    sync one)."""
    tls = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(me.peer_ca))
    tls.load_cert_chain(str(me.cert), str(me.key))
    tls.minimum_version = ssl.TLSVersion.TLSv1_3
    if pinned is not None:
        tls.sslobject_class = type("PinnedObject", (_PinnedObject,), {"pinned": pinned})
        tls.sslsocket_class = type("PinnedSocket", (_PinnedSocket,), {"pinned": pinned})
    return tls


def _check_pin(der: bytes | None, pinned: str) -> None:
    if der is None or hashlib.sha256(der).hexdigest() != pinned:
        why = "not the last certificate signed for the host (one of an earlier join)"
        refused = ssl.SSLCertVerificationError(1, f"certificate verify failed: {why}")
        refused.verify_message = why
        raise refused


class _PinnedObject(ssl.SSLObject):
    pinned = ""

    def do_handshake(self) -> None:
        super().do_handshake()  # ssl.SSLWantReadError until it is done
        _check_pin(self.getpeercert(binary_form=True), self.pinned)


class _PinnedSocket(ssl.SSLSocket):
    pinned = ""

    def do_handshake(self, block: bool = False) -> None:
        super().do_handshake(block)
        _check_pin(self.getpeercert(binary_form=True), self.pinned)
