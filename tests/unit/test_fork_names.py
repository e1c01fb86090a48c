"""Fork names: PREFIX for one, PREFIX-1..N for several, the source's name and a random suffix
without a prefix; every name is checked whole, and the count is bounded."""

from __future__ import annotations

import pytest

from sanbox.control.errors import InvalidRequestError
from sanbox.control.forks import MAX_FORKS, fork_names
from sanbox.control.names import check_name

pytestmark = pytest.mark.unit


def test_a_prefix_names_one_fork_or_numbers_several() -> None:
    assert fork_names("src", 1, "try") == ["try"]
    assert fork_names("src", 3, "try") == ["try-1", "try-2", "try-3"]


def test_without_a_prefix_each_fork_gets_the_source_name_and_its_own_suffix() -> None:
    names = fork_names("x" * 63, 5, None)
    assert len(set(names)) == 5
    for name in names:
        check_name(name)
        assert name.startswith("x" * 52 + "-")


@pytest.mark.parametrize(
    ("count", "prefix"), [(0, None), (MAX_FORKS + 1, None), (2, "x" * 62), (1, "Bad"), (1, "a\n")]
)
def test_bad_counts_and_names_are_refused(count: int, prefix: str | None) -> None:
    with pytest.raises(InvalidRequestError):
        fork_names("src", count, prefix)
