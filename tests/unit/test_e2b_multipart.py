"""envd's multipart uploads read sans-IO: a part's data handed on as its bytes come (never
gathered), in any pieces, and a body cut short or with unbounded headers refused."""

from __future__ import annotations

import pytest

from sanbox.e2b.multipart import (
    MAX_HEADERS,
    Event,
    MultipartError,
    PartData,
    PartEnd,
    PartReader,
    PartStart,
)

pytestmark = pytest.mark.unit
KIND = "multipart/form-data; boundary=XyZ"


def _part(disposition: str, data: bytes) -> bytes:
    return f"--XyZ\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + data + b"\r\n"


BODY = (
    _part('form-data; name="file"; filename="/a/b.txt"', b"first\r\n--Xy not the end")
    + _part('form-data; name="note"', b"a field")
    + _part('form-data; name="file"; filename="c.bin"', b"\x00\xff")
    + b"--XyZ--\r\n"
)


def _joined(events: list[Event]) -> list[tuple[str, object]]:
    """The events with each part's data pieces joined."""
    out: list[tuple[str, object]] = []
    for e in events:
        if isinstance(e, PartData) and out and out[-1][0] == "data":
            out[-1] = ("data", out[-1][1] + e.data)  # type: ignore[operator]
        elif isinstance(e, PartData):
            out.append(("data", e.data))
        else:
            out.append((type(e).__name__, e))
    return out


WANTED = [
    ("PartStart", PartStart("file", "/a/b.txt")),
    ("data", b"first\r\n--Xy not the end"),
    ("PartEnd", PartEnd()),
    ("PartStart", PartStart("note", None)),
    ("data", b"a field"),
    ("PartEnd", PartEnd()),
    ("PartStart", PartStart("file", "c.bin")),
    ("data", b"\x00\xff"),
    ("PartEnd", PartEnd()),
]


@pytest.mark.parametrize("size", [1, 7, len(BODY)])
def test_parts_in_any_pieces(size: int) -> None:
    reader = PartReader(KIND)
    events = [e for i in range(0, len(BODY), size) for e in reader.feed(BODY[i : i + size])]
    reader.close()
    assert _joined(events) == WANTED


def test_a_parts_data_is_handed_on_as_it_comes() -> None:
    reader = PartReader(KIND)
    first = reader.feed(_part('form-data; name="file"; filename="big"', b"x" * 100_000)[:-2])
    assert first[0] == PartStart("file", "big")
    assert sum(len(e.data) for e in first if isinstance(e, PartData)) >= 100_000 - 64
    later = reader.feed(b"y" * 100_000)
    assert sum(len(e.data) for e in later if isinstance(e, PartData)) >= 100_000


def test_a_body_cut_short_is_refused() -> None:
    reader = PartReader(KIND)
    reader.feed(BODY[:-12])
    with pytest.raises(MultipartError, match="closing boundary"):
        reader.close()


def test_bounds_and_shapes() -> None:
    with pytest.raises(MultipartError, match="boundary"):
        PartReader("multipart/form-data")
    with pytest.raises(MultipartError, match="headers are longer"):
        long = b"X-Long: " + b"a" * 4000 + b"\r\n"  # under python-multipart's bounds, 5 over ours
        PartReader(KIND).feed(b"--XyZ\r\n" + long * (MAX_HEADERS // len(long) + 1))
    with pytest.raises(MultipartError, match="name"):
        PartReader(KIND).feed(_part('form-data; filename="x"', b""))
    with pytest.raises(MultipartError, match="malformed"):
        PartReader(KIND).feed(b"--XyZ\r\nno colon here\r\n\r\n")
