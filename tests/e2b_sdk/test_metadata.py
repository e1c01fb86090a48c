"""E2B's metadata through its SDK, unmodified: any keys (mixed case, spaces, dots, `e2b/`), kept
and answered as given, listed by the SDK's metadata filter (with its start time filter too),
bounded with E2B's error shape; the pairs that are valid Sanbox labels are labels too (what /v1
filters by)."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
from e2b import Sandbox, SandboxQuery
from e2b.exceptions import SandboxException

from sanbox.control.names import METADATA_KEY_MAX, METADATA_MAX, METADATA_VALUE_MAX

from .conftest import E2bServer

pytestmark = pytest.mark.e2b
MICROSECOND = timedelta(microseconds=1)

ANY_KEYS = {
    "userId": "A1",
    "a key with spaces": "and a value, with = & ?",
    "dotted.Key": "x.y",
    "e2b/own": "kept",
    "unicode ✓": "ünïcode",
    "team": "blue",  # a valid label key: a label too
}


def test_any_keys_are_kept_listed_and_filtered(e2b_server: E2bServer) -> None:
    sbx = Sandbox.create("base", metadata=ANY_KEYS, envs=e2b_server.envs)
    other = Sandbox.create("base", metadata={"userId": "B2", "team": "blue"}, envs=e2b_server.envs)
    given = {sbx.sandbox_id: ANY_KEYS, other.sandbox_id: {"userId": "B2", "team": "blue"}}
    try:
        assert sbx.get_info().metadata == ANY_KEYS
        for query, found in [
            ({"userId": "A1"}, [sbx]),
            ({"a key with spaces": "and a value, with = & ?"}, [sbx]),
            ({"dotted.Key": "x.y", "unicode ✓": "ünïcode"}, [sbx]),
            ({"team": "blue"}, [sbx, other]),
            ({"userId": "a1"}, []),  # keys and values are compared as given
            ({"userid": "A1"}, []),
        ]:
            listed = Sandbox.list(query=SandboxQuery(metadata=query)).next_items()
            assert sorted(s.sandbox_id for s in listed) == sorted(s.sandbox_id for s in found)
            assert all(s.metadata == given[s.sandbox_id] for s in listed)

        started = sbx.get_info().started_at
        for after, found in [(started, [sbx, other]), (started + MICROSECOND, [other])]:
            since = SandboxQuery(metadata={"team": "blue"}, started_after=after)
            listed = Sandbox.list(query=since).next_items()  # started at or after
            assert {s.sandbox_id for s in listed} == {s.sandbox_id for s in found}

        admin = {"Authorization": f"Bearer {e2b_server.key}"}
        computer = "cmp_" + sbx.sandbox_id[4:]
        got = httpx.get(f"{e2b_server.url}/v1/computers/{computer}", headers=admin).json()
        own = {k: v for k, v in got["labels"].items() if not k.startswith("e2b/")}
        assert own == {"team": "blue"}  # the only pair that is a valid label
    finally:
        sbx.kill()
        other.kill()


@pytest.mark.parametrize(
    ("metadata", "said"),
    [
        ({f"k{i}": "v" for i in range(METADATA_MAX + 1)}, "at most 64 metadata keys"),
        ({"k" * (METADATA_KEY_MAX + 1): "v"}, "invalid metadata key"),
        ({"": "v"}, "invalid metadata key"),
        ({"k": "v" * (METADATA_VALUE_MAX + 1)}, "invalid value of metadata key"),
        ({"k": "nul\0"}, "invalid value of metadata key"),
        ({f"k{i}": "v" * 1000 for i in range(20)}, "at most 16384"),
    ],
)
def test_bounds_are_refused_in_e2b_shape(
    e2b_server: E2bServer, metadata: dict[str, str], said: str
) -> None:
    with pytest.raises(SandboxException) as refused:
        Sandbox.create("base", metadata=metadata, envs=e2b_server.envs)
    assert str(refused.value).startswith("400: ") and said in str(refused.value)
    assert Sandbox.list(query=SandboxQuery(metadata={"k": "v"})).next_items() == []
