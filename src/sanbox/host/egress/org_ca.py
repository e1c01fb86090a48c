"""The per-org CA of secret proxies: an ECDSA P-256 CA that the org's computers trust, and the
leaf certificates the egress proxy shows a guest for the hosts it intercepts. The CA's key never
enters a guest, a snapshot or an image: the control plane keeps it sealed in the store and hands
the proxy a `Minter`, which signs short-lived leaves in memory (seven days, renewed a day before
they end) and keeps at most `MAX_LEAVES` server contexts.

A guest names the host (its SNI), so minting is bounded per computer: a key is made and signed on
`MINT_THREADS` threads shared by every org, never on the event loop; one computer mints at most
`MINTS_PER_WINDOW` new leaves per `MINT_WINDOW` seconds and `MINTS_IN_FLIGHT` at once (beyond,
`MintRefusedError`), and holds at most `LEAVES_PER_COMPUTER` of the kept contexts: its next leaf
pushes out its own oldest, never another computer's. Concurrent asks for one name share one mint."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import ssl
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_YEARS = 10
LEAF_DAYS = 7
RENEW_BEFORE = dt.timedelta(days=1)
MAX_LEAVES = 256  # server contexts kept per org
LEAVES_PER_COMPUTER = 32  # of those, held for one computer
MINTS_PER_WINDOW = 16  # new leaves one computer may have minted per window
MINT_WINDOW = 60.0  # seconds
MINTS_IN_FLIGHT = 2  # leaves being minted for one computer at once
MINT_THREADS = 2  # threads minting leaves, for every org
ALPN = ["http/1.1"]
_executor: ThreadPoolExecutor | None = None


class MintRefusedError(Exception):
    """A computer is over its minting bounds (the message says which, and names no host)."""


def _mint_executor() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(MINT_THREADS, thread_name_prefix="sanbox-mint")
    return _executor


@dataclass
class _Leaf:
    ends: dt.datetime
    context: ssl.SSLContext
    owner: str  # the computer it is held for


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def new_ca(org: str) -> tuple[bytes, bytes]:
    """A new CA for `org`: its certificate and its private key, both PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Sanbox"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"Sanbox egress CA of org {org}"[:64]),
        ]
    )
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
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


class Minter:
    """Server contexts for intercepted hosts, each with a leaf signed by the org's CA."""

    def __init__(
        self,
        ca_pem: bytes,
        ca_key_pem: bytes,
        *,
        max_leaves: int = MAX_LEAVES,
        leaves_per_computer: int = LEAVES_PER_COMPUTER,
        mints_per_window: int = MINTS_PER_WINDOW,
        mint_window: float = MINT_WINDOW,
        mints_in_flight: int = MINTS_IN_FLIGHT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ca_pem = ca_pem
        self._ca = x509.load_pem_x509_certificate(ca_pem)
        key = serialization.load_pem_private_key(ca_key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("the org CA's key is not an EC key")
        self._ca_key = key
        self.max_leaves, self.leaves_per_computer = max_leaves, leaves_per_computer
        self.mints_per_window, self.mint_window = mints_per_window, mint_window
        self.mints_in_flight, self.clock = mints_in_flight, clock
        self._leaves: OrderedDict[str, _Leaf] = OrderedDict()
        self._held: Counter[str] = Counter()  # leaves kept, per computer
        self._minted: dict[str, deque[float]] = {}  # per computer: when its recent mints began
        self._in_flight: Counter[str] = Counter()
        self._pending: dict[str, asyncio.Task[_Leaf]] = {}  # name -> its mint under way
        self._lock = threading.Lock()

    async def context(self, name: str, owner: str = "") -> ssl.SSLContext:
        """A TLS server context presenting a certificate for `name` (ALPN: HTTP/1.1 only), for
        the computer `owner`; MintRefusedError if it needs a new leaf beyond its bounds."""
        with self._lock:
            held = self._leaves.get(name)
            if held is not None and held.ends - RENEW_BEFORE > _now():
                self._leaves.move_to_end(name)
                return held.context
        pending = self._pending.get(name)
        if pending is None:
            self._admit(owner)
            pending = asyncio.ensure_future(self._minted_for(name, owner))
            self._pending[name] = pending
        return (await asyncio.shield(pending)).context

    def _admit(self, owner: str) -> None:
        """Count a new mint for `owner`, or refuse it."""
        now = self.clock()
        recent = self._minted.setdefault(owner, deque())
        while recent and now - recent[0] >= self.mint_window:
            recent.popleft()
        if self._in_flight[owner] >= self.mints_in_flight:
            raise MintRefusedError(f"over {self.mints_in_flight} certificates minted at once")
        if len(recent) >= self.mints_per_window:
            raise MintRefusedError(
                f"over {self.mints_per_window} new certificates in {round(self.mint_window)} s"
            )
        recent.append(now)
        self._in_flight[owner] += 1
        for other in [o for o, times in self._minted.items() if not times]:
            del self._minted[other]  # computers with no recent mint are forgotten

    async def _minted_for(self, name: str, owner: str) -> _Leaf:
        try:
            loop = asyncio.get_running_loop()
            ends, ctx = await loop.run_in_executor(_mint_executor(), self._mint, name)
            leaf = _Leaf(ends, ctx, owner)
            with self._lock:
                self._keep(name, leaf)
            return leaf
        finally:
            self._in_flight[owner] -= 1
            if self._in_flight[owner] <= 0:
                del self._in_flight[owner]
            self._pending.pop(name, None)

    def _keep(self, name: str, leaf: _Leaf) -> None:
        """Keep `leaf`: its computer's oldest goes if it holds its share, the org's oldest if
        the org holds `max_leaves`."""
        self._forget(name)
        if self._held[leaf.owner] >= self.leaves_per_computer:
            oldest = next(n for n, held in self._leaves.items() if held.owner == leaf.owner)
            self._forget(oldest)
        self._leaves[name] = leaf
        self._held[leaf.owner] += 1
        while len(self._leaves) > self.max_leaves:
            self._forget(next(iter(self._leaves)))

    def _forget(self, name: str) -> None:
        held = self._leaves.pop(name, None)
        if held is not None:
            self._held[held.owner] -= 1
            if self._held[held.owner] <= 0:
                del self._held[held.owner]

    def __len__(self) -> int:
        return len(self._leaves)

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
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
                critical=False,
            )
            .sign(self._ca_key, hashes.SHA256())
        )
        chain = cert.public_bytes(serialization.Encoding.PEM) + self.ca_pem
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_alpn_protocols(ALPN)
        with _in_memory(chain) as cert_file, _in_memory(key_pem) as key_file:
            ctx.load_cert_chain(cert_file, key_file)
        return ends, ctx


@contextlib.contextmanager
def _in_memory(data: bytes) -> Iterator[str]:
    """`data` at a path that is on no disk (a memfd of this process), for `ssl`'s loaders that
    read files only: a leaf's key is never written anywhere, on a server or a fleet host."""
    fd = os.memfd_create("sanbox-leaf", os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


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
