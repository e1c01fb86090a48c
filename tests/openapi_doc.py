"""docs/openapi.json as JSON Schema validators, for tests that check what travels on the wire."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

# jsonschema has no type hints (types-jsonschema is not among the test dependencies)
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

DOC = Path(__file__).parents[1] / "docs" / "openapi.json"


@cache
def document() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DOC.read_text())
    return doc


def schema(name: str) -> dict[str, Any]:
    """The component `name` of the document."""
    found: dict[str, Any] = document()["components"]["schemas"][name]
    return found


@cache
def validator(name: str) -> Draft202012Validator:
    """Validates against the component `name`, its `$ref`s resolved in the same document."""
    root = {"$ref": f"#/components/schemas/{name}", "components": document()["components"]}
    return Draft202012Validator(root)


def check(name: str, message: str | dict[str, Any]) -> dict[str, Any]:
    """`message` (JSON text or decoded) if it is a valid `name`; else `ValidationError`."""
    value: dict[str, Any] = json.loads(message) if isinstance(message, str) else message
    validator(name).validate(value)
    return value
