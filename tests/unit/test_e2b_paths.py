"""A path the SDK sends, made absolute as envd's `ExpandAndResolve` makes it: `~` is the call's
user's home, relative paths are under it, `.` and `..` are resolved (the guest agent refuses
`..`), and `~name` is refused."""

from __future__ import annotations

import pytest

from sanbox.e2b.connect import ConnectError
from sanbox.e2b.envd import Sandbox

pytestmark = pytest.mark.unit


def _sandbox(home: str) -> Sandbox:
    return Sandbox(None, None, "cmp_x", "user", home, {})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("given", "home", "path"),
    [
        ("", "/home/user", "/home/user"),
        ("~", "/home/user", "/home/user"),
        ("~/", "/home/user", "/home/user"),
        ("~/a/./b/", "/home/user", "/home/user/a/b"),
        ("a/b", "/home/user", "/home/user/a/b"),
        ("a/../../x", "/home/user", "/home/x"),
        ("../../../../etc", "/home/user", "/etc"),
        ("~/../../..", "/home/user", "/"),
        ("/abs/x/../y", "/home/user", "/abs/y"),
        ("//twice//slashed", "/home/user", "/twice/slashed"),
        ("~/a", "/", "/a"),
        ("~user", "/home/user", None),
        ("~root/x", "/home/user", None),
    ],
)
def test_paths_resolve_as_envds(given: str, home: str, path: str | None) -> None:
    if path is None:
        with pytest.raises(ConnectError, match="cannot expand user-specific home dir") as refused:
            _sandbox(home).path(given)
        assert refused.value.code == "invalid_argument"
    else:
        assert _sandbox(home).path(given) == path
