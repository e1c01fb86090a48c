"""Leaves of the org CA are minted off the event loop and within bounds per computer: new leaves
per window, mints at once, and a share of the kept contexts that one computer cannot push the
others out of; and a leaf's key is never written to a file."""

from __future__ import annotations

import asyncio
import datetime as dt
import pathlib
import ssl
import tempfile
import threading

import pytest

from sanbox.host.egress.org_ca import Minter, MintRefusedError, new_ca

pytestmark = pytest.mark.unit
CA = new_ca("acme")


class Recording(Minter):
    """A minter that tells which thread minted, and can hold its mints until released."""

    def __init__(self, **bounds: object) -> None:
        super().__init__(*CA, **bounds)  # type: ignore[arg-type]
        self.threads: list[int] = []
        self.release = threading.Event()
        self.release.set()

    def _mint(self, name: str) -> tuple[dt.datetime, ssl.SSLContext]:
        self.threads.append(threading.get_ident())
        self.release.wait(10)
        return super()._mint(name)


def test_a_leaf_is_minted_off_the_event_loop_and_kept() -> None:
    minter = Recording()

    async def scenario() -> None:
        first = await minter.context("a.test", "c1")
        assert await minter.context("a.test", "c2") is first  # kept: not minted again
        assert minter.threads and threading.get_ident() not in minter.threads

    asyncio.run(scenario())
    assert len(minter.threads) == 1


def test_new_leaves_per_window_are_bounded_per_computer() -> None:
    now = [0.0]
    minter = Recording(mints_per_window=3, mint_window=60.0, clock=lambda: now[0])

    async def scenario() -> None:
        for i in range(3):
            await minter.context(f"n{i}.test", "c1")
        with pytest.raises(MintRefusedError, match="over 3 new certificates in 60 s"):
            await minter.context("n3.test", "c1")
        await minter.context("n0.test", "c1")  # a kept leaf is served still
        await minter.context("other.test", "c2")  # another computer mints on
        now[0] = 61.0
        await minter.context("n3.test", "c1")  # the window has passed

    asyncio.run(scenario())


def test_mints_at_once_are_bounded_per_computer_and_shared_per_name() -> None:
    minter = Recording(mints_in_flight=2)
    minter.release.clear()

    async def scenario() -> None:
        a = asyncio.ensure_future(minter.context("a.test", "c1"))
        same = asyncio.ensure_future(minter.context("a.test", "c1"))  # rides on the first
        b = asyncio.ensure_future(minter.context("b.test", "c1"))
        await asyncio.sleep(0)
        with pytest.raises(MintRefusedError, match="at once"):
            await minter.context("c.test", "c1")
        minter.release.set()
        assert await a is await same
        await b

    asyncio.run(scenario())
    assert len(minter.threads) == 2


def test_one_computer_cannot_push_the_others_leaves_out() -> None:
    minter = Recording(max_leaves=8, leaves_per_computer=3, mints_per_window=100)

    async def scenario() -> None:
        kept = await minter.context("api.test", "c2")
        for i in range(20):  # c1 cycles names
            await minter.context(f"x{i}.test", "c1")
        assert len(minter) == 4  # c1's last three and c2's one
        assert await minter.context("api.test", "c2") is kept

    asyncio.run(scenario())


def test_a_leaf_key_is_written_to_no_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    """Minted in memory only (a memfd for `ssl`'s loader): with no temporary folder to write
    in, a leaf is still made, and it is the CA's."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "none"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "none"))
    _ends, context = Minter(*CA)._mint("api.example.com")
    assert isinstance(context, ssl.SSLContext) and not (tmp_path / "none").exists()
