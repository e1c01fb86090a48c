"""The SDK's records and exec messages against docs/openapi.json, field for field.

The SDK decodes the API's JSON into plain dataclasses (it does not import pydantic, to start
fast), so nothing ties them to the server's models but this test. The drift it stops: a field the
API returns that the SDK drops (`ComputerRecord` without `allow`), a field the SDK requires that
the API may leave out, a type the SDK cannot hold (`signal` as a name while the server sends a
number), and an exec message the SDK sends that the server does not accept.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from sanbox.sdk import exec_protocol, fleet, types, usage

from ..openapi_doc import check, schema

pytestmark = pytest.mark.unit

# each record the SDK decodes -> the OpenAPI component it decodes
RECORDS: dict[type, str] = {
    types.ComputerRecord: "Computer",
    types.ExecResult: "ExecResponse",
    types.FileEntry: "FileEntry",
    types.Event: "Event",
    types.ImageBuild: "ImageBuildOut",
    types.Org: "OrgOut",
    types.Quota: "QuotaOut",
    types.OrgRegions: "OrgRegionsOut",
    types.ApiKey: "KeyOut",
    types.AuditRecord: "AuditRecordOut",
    types.HostInfo: "HostInfo",
    fleet.FleetHost: "HostOut",
    types.SshAccess: "SshAccess",
    types.PublishedPort: "PortOut",
    types.ViewLink: "ViewLinkOut",
    types.Snapshot: "Snapshot",
    types.Template: "Template",
    types.Pool: "Pool",
    types.BuildCachePruned: "BuildCachePruned",
    types.Secret: "Secret",
    types.SecretBinding: "SecretBinding",
    usage.UsageTotals: "UsageTotals",
    usage.MetricSample: "MetricSample",
    usage.Metrics: "MetricsOut",
    types.Stdout: "ExecStdout",
    types.Stderr: "ExecStderr",
    types.Exit: "ExecExit",
    exec_protocol.ExecError: "ExecError",
}
# each message the SDK sends -> its component (all of them members of `ExecClientMessage`)
MESSAGES: dict[type, str] = {
    exec_protocol.ExecStart: "ExecStart",
    exec_protocol.ExecStdin: "ExecStdin",
    exec_protocol.ExecEof: "ExecEof",
    exec_protocol.ExecSignal: "ExecSignal",
    exec_protocol.ExecResize: "ExecResize",
}
JSON_TYPES = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "object": "dict",
    "array": "list",
    "null": "None",
}


def json_types(prop: dict[str, Any]) -> set[str]:
    """The Python type names a property's values can have (`$ref`s are objects here)."""
    if "anyOf" in prop:
        return set().union(*(json_types(p) for p in prop["anyOf"]))
    if "$ref" in prop or "allOf" in prop:
        return {"dict"}
    if "const" in prop or "enum" in prop:
        return {"str"}
    if "base64" in prop.get("description", ""):
        return {"bytes"}  # the SDK holds the decoded bytes
    return {JSON_TYPES[prop["type"]]}


def python_types(annotation: str) -> set[str]:
    """`int | str | None` -> {"int", "str", "None"}; `dict[str, Any]` -> {"dict"}."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(annotation):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "|" and depth == 0:
            parts.append(annotation[start:i])
            start = i + 1
    parts.append(annotation[start:])
    return {p.strip().split("[")[0] for p in parts}


def mismatches(cls: type, component: str, sent: bool = False) -> list[str]:
    """What keeps `cls` from holding every `component` the API sends (or, `sent`, from being
    a `component` the API accepts: the SDK sends every field)."""
    doc = schema(component)
    # a message's `type` tag is the SDK class itself (an event's `type` is a field)
    props = {k: v for k, v in doc["properties"].items() if "const" not in v}
    required = set(doc.get("required", [])) & props.keys()
    fields = {f.name: f for f in dataclasses.fields(cls)}
    problems = [f"{n}: in the API, not in the SDK" for n in sorted(props.keys() - fields.keys())]
    problems += [f"{n}: in the SDK, not in the API" for n in sorted(fields.keys() - props.keys())]
    for name in sorted(fields.keys() & props.keys()):
        f = fields[name]
        has_default = f.default is not dataclasses.MISSING or (
            f.default_factory is not dataclasses.MISSING
        )
        if not sent and not has_default and name not in required:
            problems.append(f"{name}: required by the SDK, optional in the API")
        sdk, api = python_types(str(f.type)), json_types(props[name])
        if "Any" in sdk:
            continue
        if "float" in (api if sent else sdk):
            (api if sent else sdk).add("int")  # a JSON number may be written without a fraction
        if sent and not sdk <= api:
            problems.append(f"{name}: the SDK sends {sorted(sdk)}, the API takes {sorted(api)}")
        if not sent and not api <= sdk:
            problems.append(f"{name}: the API sends {sorted(api)}, the SDK holds {sorted(sdk)}")
    return problems


@pytest.mark.parametrize("cls", list(RECORDS), ids=lambda c: c.__name__)
def test_every_record_the_sdk_decodes_matches_the_api(cls: type) -> None:
    assert mismatches(cls, RECORDS[cls]) == []


@pytest.mark.parametrize("cls", list(MESSAGES), ids=lambda c: c.__name__)
def test_every_message_the_sdk_sends_matches_the_api(cls: type) -> None:
    assert mismatches(cls, MESSAGES[cls], sent=True) == []
    assert schema(MESSAGES[cls])["properties"]["type"]["const"] == cls.TYPE  # type: ignore[attr-defined]


def test_no_record_escapes_the_check() -> None:
    """A dataclass added to sdk/types.py or the exec codec must be mapped above."""
    found = {
        obj
        for module in (types, exec_protocol)
        for obj in vars(module).values()
        if dataclasses.is_dataclass(obj) and obj.__module__ == module.__name__
    }
    assert found - RECORDS.keys() - MESSAGES.keys() == set()


def test_the_wire_unions_name_every_message() -> None:
    client = {r["$ref"].rsplit("/", 1)[-1] for r in schema("ExecClientMessage")["oneOf"]}
    server = {r["$ref"].rsplit("/", 1)[-1] for r in schema("ExecServerMessage")["oneOf"]}
    assert client == set(MESSAGES.values())
    assert server == {"ExecStdout", "ExecStderr", "ExecExit", "ExecError"}


def test_what_the_sdk_encodes_is_a_valid_client_message() -> None:
    sent = [
        exec_protocol.ExecStart(["ls", "-l"], {"A": "1"}, "/tmp", "root", 5.0),
        exec_protocol.ExecStart(None, pty=True, rows=40, cols=120),
        exec_protocol.ExecStdin(b"\x00\xffdata"),
        exec_protocol.ExecEof(),
        exec_protocol.ExecSignal(exec_protocol.signal_number("SIGTERM")),
        exec_protocol.ExecResize(33, 99),
    ]
    for message in sent:
        check("ExecClientMessage", message.encode())


def test_signals_are_linux_numbers_whatever_the_client_runs_on() -> None:
    number = exec_protocol.signal_number
    assert [number(s) for s in ("SIGINT", "INT", "int", " sigterm ", "9", 15)] == [
        2,
        2,
        2,
        15,
        9,
        15,
    ]
    assert number("SIGUSR1") == 10  # 30 on macOS: the guest is Linux
    for bad in ("SIGNOPE", "0", 65, ""):
        with pytest.raises(ValueError):
            number(bad)


def test_server_messages_decode_to_the_sdk_events() -> None:
    decode = exec_protocol.decode
    assert decode('{"type": "stdout", "data": "aGk="}') == types.Stdout(b"hi")
    assert decode('{"type": "stderr", "data": ""}') == types.Stderr(b"")
    exit = '{"type": "exit", "exit_code": 143, "signal": 15, "timed_out": false}'
    assert decode(exit) == types.Exit(143, 15)
    error = '{"type": "error", "code": "computer_not_found", "message": "no"}'
    assert decode(error) == exec_protocol.ExecError("computer_not_found", "no")
    assert decode('{"type": "from-a-newer-server"}') is None
