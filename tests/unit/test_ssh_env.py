"""The computer's environment handed to `sshd -i` as one quoted `SetEnv` option (the vm tier
checks the real sshd gives sessions the values byte for byte)."""

from __future__ import annotations

import pytest

from sanbox.guest.errors import AgentRequestError
from sanbox.guest.ssh import set_env_options

pytestmark = pytest.mark.unit


def test_no_environment_adds_no_option() -> None:
    assert set_env_options(None) == [] and set_env_options({}) == []


def test_every_pair_is_quoted_with_quotes_and_backslashes_escaped() -> None:
    got = set_env_options({"B": 'x" "LD_PRELOAD=/evil', "A": "a\\b # c", "C": "one\ntwo"})
    assert got == ["-o", 'SetEnv "A=a\\\\b # c" "B=x\\" \\"LD_PRELOAD=/evil" "C=one\ntwo"']


@pytest.mark.parametrize("env", [["A=1"], {"1A": "x"}, {"A B": "x"}, {"A": 1}, {"A": "x\0y"}])
def test_anything_but_names_to_strings_is_refused(env: object) -> None:
    with pytest.raises(AgentRequestError) as info:
        set_env_options(env)
    assert info.value.code == "bad_request"
