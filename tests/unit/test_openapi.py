import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
ROOT = Path(__file__).parents[2]


def test_checked_in_openapi_matches_the_app() -> None:
    spec = importlib.util.spec_from_file_location("openapi_script", ROOT / "scripts" / "openapi.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (ROOT / "docs" / "openapi.json").read_text() == module.render(), (
        "the API changed: run `.venv/bin/python scripts/openapi.py` and commit docs/openapi.json"
    )
