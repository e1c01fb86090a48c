"""A name or id is one segment of an API path: what an HTTP client would fold is refused."""

from __future__ import annotations

import pytest

from sanbox.sdk.errors import InvalidNameError
from sanbox.sdk.paths import segment

pytestmark = pytest.mark.unit


def test_a_segment_keeps_what_is_in_the_name() -> None:
    assert segment("a/b?c#d") == "a%2Fb%3Fc%23d"
    assert segment("..x") == "..x"


@pytest.mark.parametrize("name", ["", ".", ".."])
def test_what_a_client_folds_is_refused(name: str) -> None:
    with pytest.raises(InvalidNameError) as caught:
        segment(name)
    assert caught.value.code == "invalid_name"
