"""Secrets (`sec_…`) of an org and their bindings to computers. A secret's value is write-only:
sealed as it arrives (`host.sealing`), opened only for the egress proxy (`SecretBook`), never
answered, listed, logged or put in an event. A binding gives a computer a placeholder
(`sbx_ph_…`, in the environment variable it names) and makes its egress proxy intercept the
secret's hosts and add the value there. Every change takes effect at the next request."""

from __future__ import annotations

import re

from sqlalchemy.orm import Session

from ..host.door import FIELD_VALUE, FRAMING, MIN_FORM, PolicyError, parse_rule
from ..store import repo
from ..store.models import Org, SecretBindingRow, SecretRow
from ..templates.trust import placeholder_for
from .errors import InvalidRequestError, NotFoundError
from .fleet import Fleet
from .names import check_name, is_env_name
from .secret_book import SecretBook, secret_context

Wanted = tuple[tuple[str, str | None], ...]  # (secret name, env var) pairs to bind
VALUE_MAX = 8192
VALUE_MIN = MIN_FORM  # the egress proxy's leak scan looks for no shorter form
HOSTS_MAX = 32
MAX_SECRETS = 1000  # per org (SANBOX_ORG_MAX_SECRETS): each is held by every egress proxy
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}")
ENV_NAME_MAX = 128  # the binding's column
_IP = re.compile(r"[0-9.]+")
# a wildcard over one of these hands the secret to names that strangers register
_GENERIC_SLDS = {
    "ac",
    "co",
    "com",
    "edu",
    "gob",
    "gov",
    "govt",
    "ltd",
    "mil",
    "ne",
    "net",
    "nic",
    "or",
    "org",
    "plc",
    "sch",
}
SHARED_SUFFIXES = frozenset(
    {
        "amazonaws.com",
        "appspot.com",
        "azurewebsites.net",
        "blogspot.com",
        "cloudfront.net",
        "fly.dev",
        "firebaseapp.com",
        "github.io",
        "gitlab.io",
        "glitch.me",
        "herokuapp.com",
        "netlify.app",
        "ngrok.io",
        "ngrok-free.app",
        "onrender.com",
        "pages.dev",
        "r2.dev",
        "railway.app",
        "replit.app",
        "run.app",
        "vercel.app",
        "web.app",
        "workers.dev",
    }
)


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
        why = wildcard_refusal(rule)
        if why is not None:
            raise _invalid(f"{host!r}: {why}")
        out.append(rule)
    return sorted(set(out))


def wildcard_refusal(rule: str) -> str | None:
    """Why a wildcard is too wide for a secret (None: it is not): one over a top-level domain, a
    public suffix (`*.co.uk`) or a shared hosting domain (`*.github.io`) sends the value to
    names that anybody can register."""
    if rule == "*":
        return "a bare `*` would send the secret to every host"
    if not rule.startswith("*."):
        return None
    base = rule[2:]
    labels = base.split(".")
    public = (
        len(labels) == 1
        or (len(labels) == 2 and labels[0] in _GENERIC_SLDS and len(labels[1]) == 2)
        or base in SHARED_SUFFIXES
    )
    if public:
        return (
            f"{base} is a public suffix: every name below it, anybody's, would get the secret; "
            "name the hosts (api.example.com) or a domain of your own (*.example.com)"
        )
    return None


def check_header(header: str | None, placeholder_only: bool) -> str | None:
    """`Name: template`; for a placeholder-only secret, the bare name of the header its
    placeholder goes in (None: Authorization)."""
    if placeholder_only:
        if not header:
            return None
        name = header.strip()
        if not _HEADER_NAME.fullmatch(name):
            raise _invalid(
                f"{header!r}: with --placeholder, --header names the header the placeholder is "
                "replaced in (X-Api-Key), without a template"
            )
        if name.lower().encode() in FRAMING:
            raise _invalid(f"the {name} header cannot carry a secret")
        return name
    if header is None:
        return None
    name, colon, template = header.partition(":")
    if not colon or not _HEADER_NAME.fullmatch(name.strip()):
        raise _invalid(f"{header!r} is not `Name: template` (Authorization: Bearer {{value}})")
    if name.strip().lower().encode() in FRAMING:
        raise _invalid(f"the {name.strip()} header cannot carry a secret")
    if template.count("{value}") != 1 or re.search(r"[\x00-\x1f\x7f]", template):
        raise _invalid("the header's template must hold `{value}` once, and no control byte")
    return f"{name.strip()}: {template.strip()}"


def check_value(value: str) -> bytes:
    data = value.encode()
    if not VALUE_MIN <= len(data) <= VALUE_MAX:
        raise _invalid(
            f"a secret's value is {VALUE_MIN} to {VALUE_MAX} bytes (a shorter one could not be "
            "told from ordinary text in a response, so it could come back to the computer)"
        )
    if not FIELD_VALUE.fullmatch(data):
        raise _invalid(
            "a secret's value goes into an HTTP header: printable ASCII, no CR, LF or control "
            "byte, no leading or trailing space"
        )
    return data


def check_env_name(env: str | None) -> str | None:
    if env is not None and (not is_env_name(env) or len(env) > ENV_NAME_MAX):
        raise _invalid(f"{env!r} is not an environment variable name")
    return env


def binding_row(secret: SecretRow, computer_id: str, env: str | None) -> SecretBindingRow:
    """A new binding, with the secret's placeholder (`trust.placeholder_for`)."""
    return SecretBindingRow(
        id=repo.new_id("sbd_"),
        secret_id=secret.id,
        computer_id=computer_id,
        env=env,
        placeholder=placeholder_for(secret.org_id, secret.name),
    )


def bind_in(s: Session, org_id: str, computer_id: str, wanted: Wanted) -> list[SecretBindingRow]:
    """Bind `wanted` (secret name, env var) to a computer inside the caller's transaction (a
    create's record and its bindings are written together, or neither is); a secret bound
    already keeps its binding, with the new variable."""
    made = []
    for name, env in wanted:
        secret = repo.secret(s, org_id, name)
        if secret is None:  # deleted since the request was checked
            raise NotFoundError(
                f"no secret named {name!r}: see `sanbox secret ls`", "secret_not_found"
            )
        var = check_env_name(env)
        held = repo.binding(s, secret.id, computer_id)
        if held is None:
            held = binding_row(secret, computer_id, var)
            s.add(held)
        held.env = var
        made.append(held)
    return made


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
    def __init__(self, fleet: Fleet, book: SecretBook, max_secrets: int = MAX_SECRETS) -> None:
        self.fleet, self.book, self.max_secrets = fleet, book, max_secrets

    def put(
        self,
        org: Org,
        name: str,
        value: str,
        hosts: list[str],
        header: str | None = None,
        placeholder_only: bool = False,
    ) -> SecretRow:
        """Create the secret, or rotate it (a new value, hosts and header; version + 1)."""
        check_name(name, "secret name")
        hosts, header = check_hosts(hosts), check_header(header, placeholder_only)
        data = check_value(value)
        with self.fleet.db.session() as s:
            row = repo.secret(s, org.id, name)
            if row is None:
                self._room(s, org)
                row = SecretRow(id=repo.new_id("sec_"), org_id=org.id, name=name, version=0)
                s.add(row)
            row.hosts, row.header, row.placeholder_only = hosts, header, placeholder_only
            row.version += 1
            row.sealed = self.book.sealer.seal(data, secret_context(row))
        self.book.changed()
        return row

    def _room(self, s: Session, org: Org) -> None:
        """Room for one more secret of the org, or `too_many_secrets` (its row locked for the
        transaction: two puts count one after the other)."""
        held = repo.secret_count(s, org.id)
        if held >= self.max_secrets:
            raise InvalidRequestError(
                f"this org has {held} secrets, the most it may: delete one it no longer needs "
                "(`sanbox secret ls`, `sanbox secret rm NAME`) first",
                "too_many_secrets",
            )

    def find(self, org: Org) -> list[SecretRow]:
        with self.fleet.db.session() as s:
            return repo.list_secrets(s, org.id)

    def get(self, org: Org, name: str) -> SecretRow:
        with self.fleet.db.session() as s:
            row = repo.secret(s, org.id, name)
        if row is None:
            raise NotFoundError(
                f"no secret named {name!r}: see `sanbox secret ls`", "secret_not_found"
            )
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
        with self.fleet.db.session() as s:
            binding = bind_in(s, org.id, computer.id, ((name, env),))[0]
        self.book.changed()
        where = f"; ${env} holds its placeholder" if env else ""
        self.fleet.record(
            computer.id,
            None,
            "secret.bound",
            f"secret {name} bound{where}",
            {"secret": name, "env": env},
        )
        machine = self.fleet.machines.get(computer.id)
        if machine is not None and machine.vm.alive():
            await self.fleet.trust_secrets(computer.id, machine)
        return binding, secret

    async def unbind(self, org: Org, ref: str, name: str) -> tuple[SecretBindingRow, SecretRow]:
        computer, secret = self.fleet.get(org, ref), self.get(org, name)
        with self.fleet.db.session() as s:
            binding = repo.binding(s, secret.id, computer.id)
            if binding is None:
                raise NotFoundError(
                    f"secret {name} is not bound to {computer.name}", "binding_not_found"
                )
            s.delete(binding)
        self.book.changed()
        self.fleet.record(
            computer.id, None, "secret.unbound", f"secret {name} unbound", {"secret": name}
        )
        return binding, secret
