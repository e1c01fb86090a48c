"""Secrets (`sec_…`) of an org and their bindings to computers. A secret's value is write-only:
sealed as it arrives (`host.sealing`), opened only for the egress proxy (`SecretBook`), never
answered, listed, logged or put in an event. A binding gives a computer a placeholder
(`sbx_ph_…`, in the environment variable it names) and makes its egress proxy intercept the
secret's hosts and add the value there. Every change takes effect at the next request."""

from __future__ import annotations

import re

from sqlalchemy.orm import Session

from ..host.egress.policy import PolicyError, parse_rule
from ..store import repo
from ..store.models import ComputerRow, Org, SecretBindingRow, SecretRow
from ..templates.trust import placeholder_for
from .errors import InvalidRequestError, NotFoundError
from .fleet import Fleet
from .names import check_name
from .secret_book import SecretBook

Wanted = tuple[tuple[str, str | None], ...]  # (secret name, env var) pairs to bind
VALUE_MAX = 8192
HOSTS_MAX = 32
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_IP = re.compile(r"[0-9.]+")
_FIELD_VALUE = re.compile(rb"[\x21-\x7e]+(?:[ \t]+[\x21-\x7e]+)*")  # as h11 checks it
_FORBIDDEN_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "upgrade"}


def _invalid(message: str) -> InvalidRequestError:
    return InvalidRequestError(message, "invalid_secret")


def check_hosts(hosts: list[str]) -> list[str]:
    if not hosts:
        raise _invalid("a secret needs at least one host (--host api.example.com)")
    if len(hosts) > HOSTS_MAX:
        raise _invalid(f"at most {HOSTS_MAX} hosts per secret")
    out = []
    for host in hosts:
        try:
            rule = parse_rule(host)
        except PolicyError as exc:
            raise _invalid(str(exc)) from None
        if not isinstance(rule, str) or _IP.fullmatch(rule):  # TLS names hosts, never addresses
            raise _invalid(f"{host!r}: a secret's hosts are names (api.example.com, *.example.com)")
        out.append(rule)
    return sorted(set(out))


def check_header(header: str | None, placeholder_only: bool) -> str | None:
    if placeholder_only:
        if header:
            raise _invalid("give either --header or --placeholder, not both")
        return None
    if header is None:
        return None
    name, colon, template = header.partition(":")
    if not colon or not _HEADER_NAME.fullmatch(name.strip()):
        raise _invalid(f"{header!r} is not `Name: template` (Authorization: Bearer {{value}})")
    if name.strip().lower() in _FORBIDDEN_HEADERS:
        raise _invalid(f"the {name.strip()} header cannot carry a secret")
    if template.count("{value}") != 1 or re.search(r"[\x00-\x1f\x7f]", template):
        raise _invalid("the header's template must hold `{value}` once, and no control byte")
    return f"{name.strip()}: {template.strip()}"


def check_value(value: str) -> bytes:
    data = value.encode()
    if not data or len(data) > VALUE_MAX:
        raise _invalid(f"a secret's value is 1 to {VALUE_MAX} bytes")
    if not _FIELD_VALUE.fullmatch(data):
        raise _invalid(
            "a secret's value goes into an HTTP header: printable ASCII, no CR, LF or control "
            "byte, no leading or trailing space"
        )
    return data


def check_env_name(env: str | None) -> str | None:
    if env is not None and not _ENV_NAME.fullmatch(env):
        raise _invalid(f"{env!r} is not an environment variable name")
    return env


def binding_row(secret: SecretRow, computer_id: str, env: str | None) -> SecretBindingRow:
    """A new binding, with the secret's placeholder (`trust.placeholder_for`)."""
    return SecretBindingRow(
        id=repo.new_id("sbd_"), secret_id=secret.id, computer_id=computer_id, env=env,
        placeholder=placeholder_for(secret.org_id, secret.name),
    )  # fmt: skip


def bind_in(s: Session, org_id: str, computer_id: str, wanted: Wanted) -> None:
    """Bind `wanted` (secret name, env var) to a computer inside the caller's transaction: a
    create's record and its bindings are written together, or neither is."""
    for name, env in wanted:
        secret = repo.secret(s, org_id, name)
        if secret is None:  # deleted since the request was checked
            raise NotFoundError(f"no secret named {name!r}: see `sanbox secret ls`",
                                "secret_not_found")  # fmt: skip
        held = [b for b, sec in repo.bindings_of(s, computer_id) if sec.id == secret.id]
        if held:
            held[0].env = check_env_name(env)
        else:
            s.add(binding_row(secret, computer_id, check_env_name(env)))


def check_bindable(fleet: Fleet, org: Org, wanted: Wanted, template: str) -> None:
    """The secrets a create binds exist in the org, and their variables are names."""
    with fleet.db.session() as s:
        for name, env in wanted:
            check_env_name(env)
            if repo.secret(s, org.id, name) is None:
                raise NotFoundError(
                    f"no secret named {name!r} (asked by the create or template {template}): "
                    f"`sanbox secret set {name} --value-stdin --host HOST` first",
                    "secret_not_found",
                )


def copy_bindings(fleet: Fleet, source_id: str, target_id: str) -> None:
    """A fork's bindings: its source's, placeholders and all (its processes hold them)."""
    with fleet.db.session() as s:
        for binding, secret in repo.bindings_of(s, source_id):
            s.add(binding_row(secret, target_id, binding.env))
    if fleet.book is not None:
        fleet.book.changed()


class Secrets:
    def __init__(self, fleet: Fleet, book: SecretBook) -> None:
        self.fleet, self.book = fleet, book

    def put(
        self, org: Org, name: str, value: str, hosts: list[str], header: str | None = None,
        placeholder_only: bool = False,
    ) -> SecretRow:  # fmt: skip
        """Create the secret, or rotate it (a new value, hosts and header; version + 1)."""
        check_name(name, "secret name")
        hosts, header = check_hosts(hosts), check_header(header, placeholder_only)
        data = check_value(value)
        with self.fleet.db.session() as s:
            row = repo.secret(s, org.id, name)
            if row is None:
                row = SecretRow(id=repo.new_id("sec_"), org_id=org.id, name=name, version=0)
                s.add(row)
            row.hosts, row.header, row.placeholder_only = hosts, header, placeholder_only
            row.version += 1
            row.sealed = self.book.sealer.seal(data, f"secret/{org.id}/{row.id}")
        self.book.changed()
        return row

    def find(self, org: Org) -> list[SecretRow]:
        with self.fleet.db.session() as s:
            return repo.list_secrets(s, org.id)

    def get(self, org: Org, name: str) -> SecretRow:
        with self.fleet.db.session() as s:
            row = repo.secret(s, org.id, name)
        if row is None:
            raise NotFoundError(f"no secret named {name!r}: see `sanbox secret ls`",
                                "secret_not_found")  # fmt: skip
        return row

    def delete(self, org: Org, name: str) -> SecretRow:
        """Remove the secret and its bindings: injection stops with the next request."""
        row = self.get(org, name)
        with self.fleet.db.session() as s:
            repo.drop_bindings(s, secret_id=row.id)
            live = s.get(SecretRow, row.id)
            if live is not None:
                s.delete(live)
        self.book.changed()
        return row

    # bindings -------------------------------------------------------------------------------

    def bindings(self, org: Org, ref: str) -> list[tuple[SecretBindingRow, SecretRow]]:
        computer = self.fleet.get(org, ref)
        with self.fleet.db.session() as s:
            return repo.bindings_of(s, computer.id)

    async def bind(
        self, org: Org, ref: str, name: str, env: str | None = None
    ) -> tuple[SecretBindingRow, SecretRow]:
        computer, secret = self.fleet.get(org, ref), self.get(org, name)
        binding = self._bind_row(computer, secret, check_env_name(env))
        where = f"; ${env} holds its placeholder" if env else ""
        self.fleet.record(computer.id, None, "secret.bound", f"secret {name} bound{where}",
                          {"secret": name, "env": env})  # fmt: skip
        machine = self.fleet.machines.get(computer.id)
        if machine is not None and machine.vm.alive():
            await self.fleet.trust_secrets(computer.id, machine)
        return binding, secret

    def _bind_row(
        self, computer: ComputerRow, secret: SecretRow, env: str | None
    ) -> SecretBindingRow:
        with self.fleet.db.session() as s:
            pairs = [b for b, sec in repo.bindings_of(s, computer.id) if sec.id == secret.id]
            if pairs:
                binding = s.get(SecretBindingRow, pairs[0].id)
                assert binding is not None
                binding.env = env
            else:
                binding = binding_row(secret, computer.id, env)
                s.add(binding)
        self.book.changed()
        return binding

    async def unbind(self, org: Org, ref: str, name: str) -> tuple[SecretBindingRow, SecretRow]:
        computer, secret = self.fleet.get(org, ref), self.get(org, name)
        with self.fleet.db.session() as s:
            pairs = [(b, sec) for b, sec in repo.bindings_of(s, computer.id) if sec.id == secret.id]
            if not pairs:
                raise NotFoundError(f"secret {name} is not bound to {computer.name}",
                                    "binding_not_found")  # fmt: skip
            live = s.get(SecretBindingRow, pairs[0][0].id)
            if live is not None:
                s.delete(live)
        self.book.changed()
        self.fleet.record(computer.id, None, "secret.unbound", f"secret {name} unbound",
                          {"secret": name})  # fmt: skip
        return pairs[0]
