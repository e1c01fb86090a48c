"""Build cache keys. Step i's key digests everything its result depends on: the org (a tenant
never learns what another one built), what the build starts from (the base image's build or the
base template's disk), every step up to i with the bytes of the files they copy (and, for a run
step, the environment it runs with), and, for the last key, what the template writes into its
computers (services, environment). So an unchanged
spec costs nothing, and a changed last step reuses the layers before it. Pure."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict

from .spec import Spec, Step
from .trust import secret_env

CONFIG_STEP = "configure services and environment"


def _digest(*parts: object) -> str:
    body = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(body.encode()).hexdigest()


def step_content(
    step: Step, files: dict[str, bytes], env: dict[str, str] | None = None
) -> dict[str, object]:
    """What a step's result depends on; `env`: the spec's environment, which a run step runs
    with (a changed value runs it again)."""
    content: dict[str, object] = asdict(step)
    if not step.venv:  # fields added later count only when set: earlier keys stay the same
        del content["venv"]
    if step.kind == "copy":
        content["sha256"] = hashlib.sha256(files[step.src]).hexdigest()
    if step.kind == "run" and env:
        content["env"] = dict(sorted(env.items()))
    return content


def config(spec: Spec, org_id: str) -> dict[str, object]:
    """What the last step writes: /etc/sanbox/services.json (its supervisor's file). Services of
    a template that binds secrets get their placeholders and the CA trust variables."""
    env = {**secret_env(org_id, spec.secrets), **spec.env}
    return {
        "env": dict(sorted(env.items())),
        "services": [asdict(s) for s in spec.services],
    }


def step_keys(org_id: str, start: str, spec: Spec, files: dict[str, bytes]) -> list[str]:
    """One key per step, then one for the configuration step: len(spec.steps) + 1 keys.
    `start` names what the build starts from (`image:<build>` or `snapshot:<id>`)."""
    key = _digest("sanbox-build-v1", org_id, start)
    keys = []
    for step in spec.steps:
        key = _digest(key, step_content(step, files, spec.env))
        keys.append(key)
    keys.append(_digest(key, "config", config(spec, org_id)))
    return keys


def descriptions(spec: Spec) -> list[str]:
    return [s.describe() for s in spec.steps] + [CONFIG_STEP]
