"""A gzip upload's body inflated as envd's Go reader inflates it: every member, in any pieces;
one that ends inside a member, is not gzip, or inflates past the bound raises (so the write is
abandoned) rather than ending as if whole."""

from __future__ import annotations

import asyncio
import gzip
import os
from collections.abc import AsyncIterator

import pytest

from sanbox.control.errors import InvalidRequestError
from sanbox.e2b.envd_http import CHUNK, inflated

pytestmark = pytest.mark.unit


async def _pieces(body: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


def inflate(body: bytes, size: int = 7, most: int = 2**30) -> bytes:
    async def run() -> bytes:
        return b"".join([data async for data in inflated(_pieces(body, size), most)])

    return asyncio.run(run())


@pytest.mark.parametrize("size", [1, 7, 4096, 1 << 20])
def test_every_member_is_inflated(size: int) -> None:
    first, second = b"first member\n" * 100, os.urandom(3 * CHUNK)  # past one CHUNK of output
    assert inflate(gzip.compress(first) + gzip.compress(second), size) == first + second


def test_a_body_that_inflates_far_past_its_size_is_whole() -> None:
    zeros = bytes(5 * CHUNK + 3)  # output held inside the inflater past each CHUNK asked for
    assert inflate(gzip.compress(zeros), 1 << 20) == zeros


@pytest.mark.parametrize("cut", [1, 10, -9, -1])
def test_a_body_cut_short_raises(cut: int) -> None:
    body = gzip.compress(os.urandom(10_000))
    with pytest.raises(InvalidRequestError, match="ended inside a member"):
        inflate(body[:cut])


def test_a_second_member_cut_short_raises() -> None:
    body = gzip.compress(b"whole") + gzip.compress(b"cut short")[:-4]
    with pytest.raises(InvalidRequestError, match="ended inside a member"):
        inflate(body)


def test_an_empty_body_raises() -> None:
    with pytest.raises(InvalidRequestError, match="ended inside a member"):
        inflate(b"")


@pytest.mark.parametrize("body", [b"not gzip at all", gzip.compress(b"x") + b"trailing"])
def test_what_is_not_gzip_raises(body: bytes) -> None:
    with pytest.raises(InvalidRequestError, match="not valid gzip"):
        inflate(body)


def test_inflating_past_the_bound_raises() -> None:
    body = gzip.compress(bytes(1000)) + gzip.compress(bytes(1000))
    assert len(inflate(body, most=2000)) == 2000
    with pytest.raises(InvalidRequestError, match="past the upload limit"):
        inflate(body, most=1999)
