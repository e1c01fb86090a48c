"""Firecracker's published API spec (swagger 2.0) and a checker for the part of JSON schema it
uses: $ref, type, required, properties, items, enum, minimum, maximum, additionalProperties.
A keyword the checker does not know fails the check instead of passing unread. Firecracker's
server refuses unknown fields (its serde structs deny them), so an object's properties are
closed here unless its schema says `additionalProperties`.

The spec is not in this repository (it is Firecracker's file, not ours): the tests read it from
`$SANBOX_FIRECRACKER_SPEC`, or from `shared/firecracker/` beside the repository, as JSON (or as
YAML where PyYAML is installed), and are skipped with that reason where it is absent."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

SPEC_VERSION = "1.16.1"
SPEC_NAME = f"firecracker-v{SPEC_VERSION}"
_REPO = Path(__file__).resolve().parents[2]
_IGNORED = frozenset({"description", "default", "example", "format", "readOnly"})
_CHECKED = frozenset(
    {"$ref", "type", "required", "properties", "items", "enum", "minimum", "maximum"}
    | {"additionalProperties"}
)
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def spec_candidates() -> list[Path]:
    named = os.environ.get("SANBOX_FIRECRACKER_SPEC")
    if named:
        return [Path(named)]
    shared = _REPO.parent / "shared" / "firecracker"
    return [shared / f"{SPEC_NAME}.json", shared / f"{SPEC_NAME}.yaml"]


def load_spec() -> dict[str, Any] | str:
    """The spec, or why it cannot be had here (a skip reason)."""
    for path in spec_candidates():
        if not path.is_file():
            continue
        if path.suffix == ".json":
            doc = json.loads(path.read_text())
        else:
            try:
                import yaml  # type: ignore[import-untyped]
            except ImportError:
                return f"{path} is YAML and PyYAML is not installed: give a JSON copy"
            doc = yaml.safe_load(path.read_text())
        assert isinstance(doc, dict)
        return doc
    where = " or ".join(str(p) for p in spec_candidates())
    return (
        f"Firecracker's API spec v{SPEC_VERSION} (src/firecracker/swagger/firecracker.yaml) "
        f"is not at {where}: set SANBOX_FIRECRACKER_SPEC to a JSON or YAML copy"
    )


class SchemaError(AssertionError):
    pass


def check(value: Any, schema: dict[str, Any], spec: dict[str, Any], where: str = "$") -> None:
    """Raise SchemaError where `value` breaks `schema` (refs resolved in `spec`)."""
    unknown = set(schema) - _IGNORED - _CHECKED
    if unknown:
        raise SchemaError(f"{where}: the checker does not know {sorted(unknown)}")
    if "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/definitions/"):
            raise SchemaError(f"{where}: unsupported $ref {ref}")
        check(value, spec["definitions"][ref.removeprefix("#/definitions/")], spec, where)
        return
    kind = schema.get("type")
    if kind is not None:
        ok = isinstance(value, _TYPES[kind]) and not (
            kind in ("integer", "number") and isinstance(value, bool)
        )
        if not ok:
            raise SchemaError(f"{where}: {value!r} is not of type {kind}")
    if "enum" in schema and value not in schema["enum"]:
        raise SchemaError(f"{where}: {value!r} is not one of {schema['enum']}")
    if "minimum" in schema and value < schema["minimum"]:
        raise SchemaError(f"{where}: {value!r} is below {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        raise SchemaError(f"{where}: {value!r} is above {schema['maximum']}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            check(item, schema["items"], spec, f"{where}[{i}]")
    if isinstance(value, dict):
        _check_object(value, schema, spec, where)


def _check_object(
    value: dict[str, Any], schema: dict[str, Any], spec: dict[str, Any], where: str
) -> None:
    for name in schema.get("required", ()):
        if name not in value:
            raise SchemaError(f"{where}: {name!r} is required")
    properties: dict[str, Any] = schema.get("properties", {})
    extra = schema.get("additionalProperties", False)
    for name, item in value.items():
        if name in properties:
            check(item, properties[name], spec, f"{where}.{name}")
        elif isinstance(extra, dict):
            check(item, extra, spec, f"{where}.{name}")
        elif extra is not True:
            raise SchemaError(f"{where}: {name!r} is not a field of this object")


def operation(spec: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    ops = spec["paths"].get(path)
    if ops is None or method.lower() not in ops:
        raise SchemaError(f"{method} {path} is not in Firecracker's API")
    op = ops[method.lower()]
    assert isinstance(op, dict)
    return op


def body_schema(spec: dict[str, Any], method: str, path: str) -> dict[str, Any] | None:
    for param in operation(spec, method, path).get("parameters", ()):
        if param.get("in") == "body":
            schema = param["schema"]
            assert isinstance(schema, dict)
            return schema
    return None
