"""What the egress proxy and the guest need of the org's secrets, kept in memory: for each
computer, its bound secrets as `Injection`s (values opened from the store once, then held until
any secret or binding changes: every change goes through this server and calls `changed()`, so a
removed, unbound or rotated secret is out of the next request), the environment its processes get
(placeholders, and the trust variables once it has a binding), and each org's CA as a `Minter`.
Nothing here is ever logged: an `Injection`'s value is out of its repr."""

from __future__ import annotations

import contextlib
import logging
import ssl
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.exc import IntegrityError

from ..host.door import (
    MIN_FORM,
    AgentClient,
    Handover,
    Injection,
    Minter,
    Sealer,
    applies,
    new_ca,
    upstream_context,
)
from ..store import Database, repo
from ..store.models import OrgCaRow, SecretRow
from ..templates.trust import CA_FILE, SYSTEM_BUNDLE, secret_env

log = logging.getLogger(__name__)

DEFAULT_HEADER = "Authorization: Bearer {value}"
# Install the org's CA in the guest's system store unless it is there already (stdin: the PEM).
# `update-ca-certificates` rebuilds the whole store in a shell loop of two processes per
# certificate: a minute or more in an emulated guest on a loaded host. A new CA is one file, so
# it is added as that script would add it: the file, its `.pem` link and hash link in
# /etc/ssl/certs, and its PEM appended to the bundle (where a later `update-ca-certificates`
# finds it again, the file being in /usr/local/share/ca-certificates). Only a changed file, or a
# guest without openssl, takes the full rebuild.
_TRUST = f"""set -e
f={CA_FILE}; b={SYSTEM_BUNDLE}; d=/etc/ssl/certs; t=$(mktemp); cat > "$t"
last=$(tail -n 2 "$t" | head -n 1)
if cmp -s "$t" "$f" && grep -qF "$last" "$b" 2>/dev/null; then rm -f "$t"; exit 0; fi
old=0; [ -e "$f" ] && ! cmp -s "$t" "$f" && old=1
mkdir -p "$(dirname "$f")"; mv "$t" "$f"; chmod 644 "$f"
h=$(openssl x509 -hash -noout -in "$f" 2>/dev/null || true)
if [ "$old" = 1 ] || [ -z "$h" ] || [ ! -d "$d" ]; then
  update-ca-certificates >/dev/null; exit 0
fi
ln -sf "$f" "$d/sanbox-egress-ca.pem"; ln -sf sanbox-egress-ca.pem "$d/$h.0"
grep -qF "$last" "$b" 2>/dev/null || cat "$f" >> "$b"
"""
TRUST_TIMEOUT = 300.0  # seconds: the fast path takes a second; a full rebuild, minutes emulated


def trust_failure(exit_code: int, timed_out: bool, output: bytes) -> str | None:
    """Why installing the CA failed, never empty (None: it did not fail)."""
    if timed_out:
        took = f"{TRUST_TIMEOUT:.0f} s"
        return f"updating the guest's certificate store did not finish in {took}: try again"
    if exit_code == 0:
        return None
    said = output[-300:].decode(errors="replace").strip()
    return f"updating the guest's certificate store exited with {exit_code}" + (
        f": {said}" if said else " and said nothing (is the ca-certificates package installed?)"
    )


def secret_context(row: SecretRow) -> str:
    return f"secret/{row.org_id}/{row.id}"


def ca_context(org_id: str) -> str:
    return f"ca/{org_id}"


def placeholder_header(header: str | None, placeholder_only: bool) -> bytes | None:
    """The header a placeholder-only secret names for its placeholder (None: Authorization)."""
    return header.strip().encode() if placeholder_only and header else None


def header_parts(header: str | None, placeholder_only: bool) -> tuple[bytes | None, bytes]:
    """The header to overwrite and its template (`{value}` in it), from `Name: template`."""
    if placeholder_only:
        return None, b""
    name, _, template = (header or DEFAULT_HEADER).partition(":")
    return name.strip().encode(), template.strip().encode()


@dataclass(frozen=True)
class Bound:
    org_id: str
    injections: tuple[Injection, ...]
    env: dict[str, str]


class SecretBook:
    def __init__(
        self,
        db: Database,
        key_file: Path,
        ca_bundle: Path | None = None,
        strict_placeholders: bool = False,
        substitute_any_header: bool = False,
    ) -> None:
        self.db = db
        self.sealer = Sealer(key_file)
        self.upstream = upstream_context(ca_bundle)
        self.strict_placeholders = strict_placeholders
        self.substitute_any_header = substitute_any_header  # the operator's opt-in
        self._bound: dict[str, Bound] = {}
        self._minters: dict[str, Minter] = {}
        self._ca_keys: dict[str, bytes] = {}  # org id -> its CA's key (PEM), opened once
        self._lock = threading.Lock()
        self.on_change: Callable[[], None] = lambda: None  # fleet hosts told (from any thread)

    def changed(self) -> None:
        """A secret or binding changed: read them afresh on next use (and fleet hosts that hold
        a computer's secrets get them again: `on_change`)."""
        with self._lock:
            self._bound.clear()
        self.on_change()

    def bound(self, computer_id: str) -> Bound:
        with self._lock:
            held = self._bound.get(computer_id)
        if held is not None:
            return held
        with self.db.session() as s:
            pairs = repo.bindings_of(s, computer_id)
            computer = repo.computer_by_id(s, computer_id)
        injections = []
        for binding, secret in pairs:
            header, template = header_parts(secret.header, secret.placeholder_only)
            named = placeholder_header(secret.header, secret.placeholder_only)
            value = self.sealer.open(secret.sealed, secret_context(secret))
            if len(value) < MIN_FORM:  # stored before values were 8 bytes at least: the leak
                # scan would not see it come back, so it is not sent (its placeholder goes as is)
                log.warning(
                    "secret %s of org %s is shorter than %d bytes and is not injected: set it "
                    "again (sanbox secret set)",
                    secret.name,
                    secret.org_id,
                    MIN_FORM,
                )
                continue
            injections.append(
                Injection(
                    hosts=tuple(secret.hosts),
                    header=header,
                    template=template,
                    placeholder=binding.placeholder.encode(),
                    value=value,
                    placeholder_header=named,
                    any_header=self.substitute_any_header,
                )
            )
        org_id = computer.org_id if computer else ""
        env = secret_env(org_id, {secret.name: binding.env or "" for binding, secret in pairs})
        held = Bound(org_id, tuple(injections), env)
        with self._lock:
            self._bound[computer_id] = held
        return held

    def env(self, computer_id: str) -> dict[str, str]:
        return self.bound(computer_id).env

    def forget(self, computer_id: str) -> None:
        """A computer is gone: its bindings with it."""
        with self.db.session() as s:
            repo.drop_bindings(s, computer_id=computer_id)
        self.changed()

    async def trust(self, agent: AgentClient, computer_id: str) -> str | None:
        """The org's CA in the guest's system store, if the computer has bindings (once per
        disk: when it is there, nothing changes). Returns why it failed, or None."""
        bound = self.bound(computer_id)
        if not bound.injections:
            return None
        return await self.install_ca(agent, bound.org_id)

    async def install_ca(self, agent: AgentClient, org_id: str) -> str | None:
        """The org's CA (its certificate) in a guest's system store; why it failed, in words a
        user can act on, or None."""
        pem = self.ca_pem(org_id)
        try:
            result = await agent.exec(  # the guest's answer: only what a reason needs is kept
                ["/bin/sh", "-c", _TRUST], stdin=pem, timeout=TRUST_TIMEOUT, max_output=4096
            )
        except Exception as exc:  # the guest's answer, never a value: safe to show
            return f"the guest did not answer ({exc or type(exc).__name__}): try again"
        return trust_failure(result.exit_code, result.timed_out, result.stderr or result.stdout)

    # the org's CA ---------------------------------------------------------------------------

    def minter(self, org_id: str) -> Minter:
        """The org's CA, made and stored (its key sealed) the first time it is needed."""
        with self._lock:
            held = self._minters.get(org_id)
        if held is not None:
            return held
        with self.db.session() as s:
            row = s.get(OrgCaRow, org_id)
        if row is None:
            cert, key = new_ca(org_id)
            with contextlib.suppress(IntegrityError), self.db.session() as s:  # made meanwhile
                s.add(
                    OrgCaRow(
                        org_id=org_id,
                        cert_pem=cert.decode(),
                        key_sealed=self.sealer.seal(key, ca_context(org_id)),
                    )
                )
            with self.db.session() as s:
                row = s.get(OrgCaRow, org_id)
            assert row is not None
        key = self.sealer.open(row.key_sealed, ca_context(org_id))
        minter = Minter(row.cert_pem.encode(), key)
        with self._lock:
            self._minters[org_id] = minter
            self._ca_keys[org_id] = key
        return minter

    def handover(self, computer_id: str) -> Handover | None:
        """What a fleet host needs to run this computer's secret proxy (None: nothing bound):
        its injections and its org's CA, key included. Sent over the link's mutual TLS only."""
        bound = self.bound(computer_id)
        if not bound.injections:
            return None
        minter = self.minter(bound.org_id)
        with self._lock:
            key = self._ca_keys[bound.org_id]
        return Handover(
            bound.org_id, bound.injections, minter.ca_pem, key, self.strict_placeholders
        )

    def ca_pem(self, org_id: str) -> bytes:
        return self.minter(org_id).ca_pem

    def interception(self, computer_id: str) -> ComputerInterception:
        return ComputerInterception(self, computer_id)


class ComputerInterception:
    """What the egress proxy of one computer asks: which hosts to intercept, the certificate to
    show for one, and the injections of the moment (read again for every request)."""

    def __init__(self, book: SecretBook, computer_id: str) -> None:
        self.book, self.computer_id = book, computer_id

    def applies(self, name: str) -> bool:
        return any(applies(i, name) for i in self.book.bound(self.computer_id).injections)

    async def server_context(self, name: str) -> ssl.SSLContext:
        minter = self.book.minter(self.book.bound(self.computer_id).org_id)
        return await minter.context(name, self.computer_id)

    def injections(self) -> Sequence[Injection]:
        return self.book.bound(self.computer_id).injections

    @property
    def upstream_context(self) -> ssl.SSLContext:
        return self.book.upstream

    @property
    def strict_placeholders(self) -> bool:
        return self.book.strict_placeholders

    def handover(self) -> Handover | None:
        return self.book.handover(self.computer_id)
