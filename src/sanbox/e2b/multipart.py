"""`multipart/form-data` as envd reads an upload, sans-IO: bytes in, part events out.

`PartReader.feed()` returns the events the bytes completed: a part's start (its form name and
file name), pieces of its data as they come, its end. It holds no part's data: what it keeps
between feeds is python-multipart's lookbehind for the boundary and the header being read (one
part's headers are `MAX_HEADERS` bytes at most), so an upload of any size streams through it."""

from __future__ import annotations

from dataclasses import dataclass

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header

MAX_HEADERS = 16 * 1024  # bytes of one part's headers


class MultipartError(ValueError):
    """A body that is not `multipart/form-data`, or one cut short."""


@dataclass(frozen=True)
class PartStart:
    name: str
    filename: str | None


@dataclass(frozen=True)
class PartData:
    data: bytes


@dataclass(frozen=True)
class PartEnd:
    pass


Event = PartStart | PartData | PartEnd


def _text(raw: bytes) -> str:
    return raw.decode(errors="replace")


class PartReader:
    def __init__(self, content_type: str) -> None:
        _kind, params = parse_options_header(content_type)
        boundary = params.get(b"boundary")
        if not boundary:
            raise MultipartError("a multipart body needs a boundary")
        self.ended = False  # the closing boundary was read
        self._events: list[Event] = []
        self._field = bytearray()
        self._value = bytearray()
        self._disposition = b""
        self._header_bytes = 0
        try:
            self._parser = MultipartParser(
                boundary,
                {
                    "on_part_begin": self._part_begin,
                    "on_header_field": self._header_field,
                    "on_header_value": self._header_value,
                    "on_header_end": self._header_end,
                    "on_headers_finished": self._headers_finished,
                    "on_part_data": self._part_data,
                    "on_part_end": self._part_end,
                    "on_end": self._end,
                },
            )
        except FormParserError as exc:
            raise MultipartError(str(exc)) from None

    def feed(self, data: bytes) -> list[Event]:
        try:
            self._parser.write(data)
        except FormParserError as exc:
            raise MultipartError(f"the multipart body is malformed: {exc}") from None
        events, self._events = self._events, []
        return events

    def close(self) -> None:
        """The body ended: it must have ended with its closing boundary."""
        if not self.ended:
            raise MultipartError("the multipart body ended before its closing boundary")

    def _part_begin(self) -> None:
        self._disposition = b""
        self._header_bytes = 0

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._count(end - start)
        self._field += data[start:end]

    def _header_value(self, data: bytes, start: int, end: int) -> None:
        self._count(end - start)
        self._value += data[start:end]

    def _count(self, size: int) -> None:
        self._header_bytes += size
        if self._header_bytes > MAX_HEADERS:
            raise MultipartError(f"a part's headers are longer than {MAX_HEADERS} bytes")

    def _header_end(self) -> None:
        if bytes(self._field).strip().lower() == b"content-disposition":
            self._disposition = bytes(self._value)
        self._field.clear()
        self._value.clear()

    def _headers_finished(self) -> None:
        _kind, options = parse_options_header(self._disposition)
        name = options.get(b"name")
        if name is None:
            raise MultipartError('a part\'s Content-Disposition has no "name"')
        filename = options.get(b"filename")
        self._events.append(PartStart(_text(name), None if filename is None else _text(filename)))

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if end > start:
            self._events.append(PartData(data[start:end]))

    def _part_end(self) -> None:
        self._events.append(PartEnd())

    def _end(self) -> None:
        self.ended = True
