"""A WebSocket control message (the SSH socket's `eof`) is small JSON: anything else is a
`ValueError`, which ends the socket with `validation_error` (a deep nesting raised
RecursionError, which nothing caught)."""

from __future__ import annotations

import pytest

from sanbox.api.routes._ws import MOST_CONTROL, control_message

pytestmark = pytest.mark.unit


def test_a_control_message_is_read() -> None:
    assert control_message('{"type": "eof"}') == {"type": "eof"}


@pytest.mark.parametrize("text", ["[" * 3000, "x" * (MOST_CONTROL + 1), "{", '"a'])
def test_what_is_not_a_small_json_message_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        control_message(text)
