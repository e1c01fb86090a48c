"""A package step names registry packages only: direct references (URLs, VCS, `file:`, paths,
archives), options smuggled as entries, look-alike letters and overlong entries are refused with
what to write instead, while the usual names, pins, ranges, extras and markers keep working."""

from __future__ import annotations

import pytest

from sanbox.templates.package_names import (
    MAX_LENGTH,
    PackageNameError,
    check_all,
    check_apt,
    check_npm,
    check_pip,
)
from sanbox.templates.spec import SpecError, parse

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "entry",
    [
        "requests==2.32",
        "cowsay",
        "numpy>=1.26; python_version>='3.9'",
        "requests[socks]>=2,<3",
        "hermes-agent[messaging]==0.19.0",
        "zope.interface~=6.0",
    ],
)
def test_pip_takes_names_pins_extras_and_markers(entry: str) -> None:
    assert check_pip(entry) == entry


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("evil @ https://attacker.example/evil-1.0.whl", "direct reference"),
        ("evil @ file:///etc/passwd", "direct reference"),
        ("evil@git+https://github.com/a/b", "direct reference"),
        ("git+https://github.com/a/b.git#egg=b", "not a requirement"),
        ("https://attacker.example/evil.tar.gz", "not a requirement"),
        ("file:///tmp/x", "not a requirement"),
        ("./local/project", "not a requirement"),
        ("/tmp/evil-1.0-py3-none-any.whl", "not a requirement"),
        ("evil-1.0-py3-none-any.whl", "archive file"),
        ("evil.tar.gz", "archive file"),
        ("-e git+https://github.com/a/b", "an option"),
        ("--index-url=https://attacker.example/simple", "an option"),
        ("--extra-index-url https://attacker.example", "an option"),
        ("-r requirements.txt", "an option"),
        ("requests --index-url=https://attacker.example", "not a requirement"),
        ("requests==1 --hash=sha256:00", "not a requirement"),
        ("requests\n--index-url=x", "printable ASCII"),
        (" requests", "not a requirement"),
        ("requests # comment", "not a requirement"),
        ("requests; rm -rf /", "not a requirement"),
        ("reqυests", "printable ASCII"),  # a Greek upsilon
        ("ｒequests", "printable ASCII"),  # a fullwidth r
        ("a" * (MAX_LENGTH + 1), "1 to"),
        ("", "1 to"),
    ],
)
def test_pip_refuses_anything_but_a_registry_requirement(entry: str, reason: str) -> None:
    with pytest.raises(PackageNameError, match=reason):
        check_pip(entry)


@pytest.mark.parametrize(
    "entry",
    [
        "cowsay",
        "@types/node@20",
        "typescript@5",
        "@openai/codex@0.46.0",
        "is-number@^7.0.0",
        "left-pad@latest",
        "lodash@>=4 <5",
        "novnc@npm:@novnc/novnc@1.7.0",
    ],
)
def test_npm_takes_registry_names_versions_ranges_tags_and_aliases(entry: str) -> None:
    assert check_npm(entry) == entry


@pytest.mark.parametrize(
    "entry",
    [
        "git+https://github.com/a/b.git",
        "git://github.com/a/b",
        "github:attacker/evil",
        "attacker/evil",  # GitHub shorthand
        "evil@github:attacker/evil",
        "https://attacker.example/evil.tgz",
        "evil@https://attacker.example/evil.tgz",
        "file:../evil",
        "evil@file:/etc",
        "link:/etc",
        "./evil",
        "/tmp/evil.tgz",
        "evil.tgz@",
        "evil@npm:git+https://x/y",
        "evil@npm:https://attacker.example/e.tgz",
        "evil@npm:a@npm:b",
        "--registry=https://attacker.example",
        "-g",
        "Evil",
        "@Scope/x",
        "_evil",
        ".evil",
        "evil ",
        "ｅvil",
        "e" * (MAX_LENGTH + 1),
    ],
)
def test_npm_refuses_anything_but_a_registry_spec(entry: str) -> None:
    with pytest.raises(PackageNameError):
        check_npm(entry)


@pytest.mark.parametrize(
    "entry",
    ["jq", "libfoo1=1.2-3", "python3-venv", "g++", "libc6:amd64", "tzdata=1:2024a-0+deb12u1"],
)
def test_apt_takes_debian_names_and_versions(entry: str) -> None:
    assert check_apt(entry) == entry


@pytest.mark.parametrize(
    "entry",
    [
        "./evil.deb",
        "/tmp/evil.deb",
        "evil.deb",
        "https://attacker.example/evil.deb",
        "jq; rm -rf /",
        "jq/bookworm-backports",
        "-oDir::Etc=/tmp",
        "--allow-unauthenticated",
        "Jq",
        "j",
        "lib*",
        "jq=",
        "јq",
        "jq\n",
    ],
)
def test_apt_refuses_paths_urls_debs_globs_and_options(entry: str) -> None:
    with pytest.raises(PackageNameError):
        check_apt(entry)


def test_a_step_with_a_direct_reference_is_a_spec_error_that_says_what_to_write() -> None:
    text = 'name = "t"\n[[steps]]\npip = ["cowsay==6.1", "evil @ https://attacker.example/e.whl"]\n'
    with pytest.raises(SpecError, match=r"line|direct reference.*write `evil`") as info:
        parse(text)
    assert info.value.line == 3 and "write `evil`" in info.value.reason
    assert parse(text.replace(', "evil @ https://attacker.example/e.whl"', "")).steps


def test_entries_that_are_not_strings_are_refused() -> None:
    with pytest.raises(PackageNameError, match="strings"):
        check_all("apt", ["jq", 3])
