"""Every identifier is checked as a whole string, in one place: the same table of bad names is
refused by the check of each kind of name."""

from __future__ import annotations

import pytest

from sanbox.control.errors import InvalidRequestError
from sanbox.control.names import (
    METADATA_KEY_MAX,
    METADATA_MAX,
    METADATA_VALUE_MAX,
    check_env,
    check_labels,
    check_metadata,
    check_name,
    check_port,
    check_text,
    generate_name,
    is_label,
)

pytestmark = pytest.mark.unit

# refused everywhere a name is taken (computers, orgs, templates, snapshots, secrets)
BAD_NAMES = [
    "ho-nl\n",
    "ho-nl\r\n",
    "\nho-nl",
    "",
    " ",
    "a b",
    "tab\there",
    "nul\0",
    "bell\a",
    "del\x7f",
    "line\u2028sep",
    "UPPER",
    "-lead",
    "trail-",
    "a" * 64,
    "dot.ted",
    "under_score",
    "ümlaut",
    "cmp_x",
    "slash/x",
    "../x",
    "x\u200b",
]
GOOD_NAMES = ["a", "ho-port", "x" * 63, "0", "web-1", "a--b"]
BAD_TEXT = ["nl\n", "cr\r", "nul\0", "esc\x1b[31m", "c1\x85", "x" * 129, "ls\u2028"]


@pytest.mark.parametrize("kind", ["name", "org", "template", "snapshot", "secret"])
@pytest.mark.parametrize("bad", BAD_NAMES)
def test_bad_names_are_refused_for_every_kind(kind: str, bad: str) -> None:
    with pytest.raises(InvalidRequestError) as exc:
        check_name(bad, kind)
    assert exc.value.code == "invalid_name" and kind in exc.value.message
    assert "\n" not in exc.value.message  # the message is one line, the name shown escaped


@pytest.mark.parametrize("good", GOOD_NAMES)
def test_good_names(good: str) -> None:
    assert check_name(good) == good


def test_generated_names_pass_their_own_check() -> None:
    for _ in range(50):
        check_name(generate_name())


@pytest.mark.parametrize("bad", BAD_TEXT)
def test_bad_key_names(bad: str) -> None:
    with pytest.raises(InvalidRequestError) as exc:
        check_text(bad, "key name")
    assert exc.value.code == "invalid_name"


@pytest.mark.parametrize(
    "bad",
    [
        b
        for b in BAD_NAMES
        if b != "dot.ted" and b != "under_score" and b != "slash/x" and b != "cmp_x" and b != "a--b"
    ],
)
def test_bad_label_keys(bad: str) -> None:
    with pytest.raises(InvalidRequestError) as exc:
        check_labels({bad: "v"})
    assert exc.value.code == "invalid_label"


@pytest.mark.parametrize("bad", BAD_TEXT[:-2] + ["x" * 256])
def test_bad_label_values(bad: str) -> None:
    with pytest.raises(InvalidRequestError) as exc:
        check_labels({"team": bad})
    assert exc.value.code == "invalid_label"


def test_label_shapes_that_are_fine() -> None:
    labels = {"team": "a b: c", "app.example.com/tier": "web", "x_y": ""}
    assert check_labels(labels) == labels
    with pytest.raises(InvalidRequestError):
        check_labels({f"k{i}": "v" for i in range(65)})


@pytest.mark.parametrize("bad", ["1X", "A-B", "", "X\n", "A=B", "x" * 256])
def test_bad_env_names(bad: str) -> None:
    with pytest.raises(InvalidRequestError) as exc:
        check_env({bad: "v"})
    assert exc.value.code == "invalid_env"


def test_env_values_may_hold_newlines_but_not_nul() -> None:
    assert check_env({"PEM": "a\nb"}) == {"PEM": "a\nb"}
    with pytest.raises(InvalidRequestError):
        check_env({"X": "a\0b"})


@pytest.mark.parametrize("bad", [0, -1, 65536, True, "80", 8.0])
def test_bad_ports(bad: object) -> None:
    with pytest.raises(InvalidRequestError) as exc:
        check_port(bad)
    assert exc.value.code == "invalid_port"


def test_metadata_take_any_keys_within_bounds() -> None:
    given = {"userId": "A1", "a b.c": "", "e2b/x": "y", "✓": "ü" * METADATA_VALUE_MAX}
    assert check_metadata(given) == given


@pytest.mark.parametrize(
    "bad",
    [
        {f"k{i}": "" for i in range(METADATA_MAX + 1)},
        {"": "v"},
        {"k" * (METADATA_KEY_MAX + 1): "v"},
        {"nul\0": "v"},
        {"k": "nul\0"},
        {"k": "v" * (METADATA_VALUE_MAX + 1)},
        {f"k{i}": "ü" * 1000 for i in range(9)},  # 9 * 2000 bytes: past 16 KiB
    ],
)
def test_metadata_past_their_bounds_are_refused(bad: dict[str, str]) -> None:
    with pytest.raises(InvalidRequestError) as exc:
        check_metadata(bad)
    assert exc.value.code == "invalid_metadata" and "\n" not in exc.value.message


def test_only_valid_label_pairs_are_labels() -> None:
    assert is_label("team", "blue") and is_label("app.example/tier", "")
    assert not is_label("userId", "x") and not is_label("a b", "x")
    assert not is_label("team", "line\n") and not is_label("team", "v" * 256)
