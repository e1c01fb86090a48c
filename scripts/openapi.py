"""Write the API's OpenAPI document to docs/openapi.json (the test tier fails when they differ)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from sanbox.api import ServerSettings, create_app

DOC = Path(__file__).parents[1] / "docs" / "openapi.json"


def render() -> str:
    app = create_app(ServerSettings(data_dir=Path("/var/lib/sanbox")))
    return json.dumps(app.openapi(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    DOC.write_text(render())
    print(f"wrote {DOC}", file=sys.stderr)
