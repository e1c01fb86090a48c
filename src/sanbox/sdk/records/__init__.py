"""The API's records as frozen dataclasses, each built from its JSON by `from_json`, one module
per kind of thing they describe; sanbox.sdk.types gathers them all.

Apart because defining a frozen dataclass costs ~1 ms at import: the CLI's quick commands
(sanbox.cli.quick), which read one or two kinds, define those and not the twenty.
"""

from __future__ import annotations

from typing import Any


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """Keep the fields this SDK knows, so a newer server's extra fields do not break it."""
    names = cls.__dataclass_fields__  # type: ignore[attr-defined]
    return {k: v for k, v in data.items() if k in names}
