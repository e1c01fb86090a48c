"""A session of its own (fleet/pg_session.py: the singleton jobs' locks, the event relay's
LISTEN) is opened in a worker thread and may be closed from another while that thread is still
connecting (a server's shutdown cancels the task, not its thread): the session made after the
close is closed at once. It had been left open to the garbage collector, whose ResourceWarning
then failed whichever test was running."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import pytest

from sanbox.fleet.pg_session import OwnSession

if TYPE_CHECKING:
    import psycopg

pytestmark = pytest.mark.unit


class Session:
    """Stands in for a psycopg connection: only whether it was closed matters here."""

    closed = False

    def close(self) -> None:
        self.closed = True


def stand_in() -> psycopg.Connection[tuple[object, ...]]:
    """A Session, typed as the connection it stands in for."""
    return cast("psycopg.Connection[tuple[object, ...]]", Session())


def test_a_session_made_after_the_close_is_closed_at_once() -> None:
    own, made = OwnSession(), Session()

    def connect() -> Any:
        own.close()  # the owner closes it while this thread is connecting
        return made

    assert own.open(connect) is None
    assert made.closed and own.conn is None
    assert own.open(lambda: pytest.fail("no session is made after the close")) is None


def test_a_lost_session_is_made_again_until_the_close() -> None:
    own, first, second = OwnSession(), stand_in(), stand_in()
    assert own.open(lambda: first) is first
    assert own.open(lambda: second) is first  # open: kept
    own.drop()  # lost (an error on it)
    assert first.closed and own.open(lambda: second) is second
    own.close()
    assert second.closed and own.conn is None
