"""What a computer with secrets holds in place of them, and where it keeps the org's CA: shared
by the control plane (bindings, the environment of commands) and template builds (the services of
a template that binds secrets start with the same). Pure."""

from __future__ import annotations

import hashlib

CA_FILE = "/usr/local/share/ca-certificates/sanbox-egress-ca.crt"
SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
TRUST_ENV = {
    "SSL_CERT_FILE": SYSTEM_BUNDLE,
    "REQUESTS_CA_BUNDLE": SYSTEM_BUNDLE,
    "NODE_EXTRA_CA_CERTS": CA_FILE,
    "PIP_CERT": SYSTEM_BUNDLE,
}
PLACEHOLDER_PREFIX = "sbx_ph_"


def placeholder_for(org_id: str, secret: str) -> str:
    """The placeholder of the org's secret `secret` in every computer it is bound to: the same
    one each time (a template's services start with it before any computer of it exists). It is
    not secret: the egress proxy adds a value only for computers the secret is bound to."""
    digest = hashlib.sha256(f"sanbox-placeholder/{org_id}/{secret}".encode()).hexdigest()
    return PLACEHOLDER_PREFIX + digest[:32]


def secret_env(org_id: str, bound: dict[str, str]) -> dict[str, str]:
    """The environment of processes in a computer with `bound` secrets (name -> variable, ""
    for none): each variable with its placeholder, and the CA trust variables."""
    if not bound:
        return {}
    env = {var: placeholder_for(org_id, name) for name, var in bound.items() if var}
    return {**TRUST_ENV, **env}
