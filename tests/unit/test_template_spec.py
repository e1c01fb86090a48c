"""The template spec: a good one reads whole; every bad one is refused with the line it is on
and the reason, before anything is built."""

from __future__ import annotations

from pathlib import Path

import pytest

from sanbox.templates.keys import step_content, step_keys
from sanbox.templates.spec import Ready, Service, Spec, SpecError, Step, parse

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).parents[2] / "examples" / "templates" / "notes" / "sanbox.toml"

GOOD = """\
base = "base"
name = "notes"
idle_timeout = 600
allow = ["api.github.com"]
ports = [8080]
env = { NOTES_DIR = "/srv/notes" }

[resources]
vcpus = 2
memory_mib = 1024
disk_gib = 8

[build]
allow = ["deb.debian.org", "pypi.org"]

[[steps]]
apt = ["jq"]

[[steps]]
pip = ["cowsay==6.1"]

[[steps]]
copy = "notes.txt"
to = "/srv/notes/notes.txt"
mode = "0600"

[[steps]]
run = "echo built > /srv/notes/built"

[[services]]
name = "web"
command = "python3 -m http.server 8080"
cwd = "/srv/notes"
restart = "on-failure"

[ready]
port = 8080
timeout = 30
"""


def test_a_good_spec_reads_whole() -> None:
    spec = parse(GOOD)
    assert (spec.base, spec.name, spec.vcpus, spec.memory_mib, spec.disk_gib) == (
        "base",
        "notes",
        2,
        1024,
        8,
    )
    assert spec.steps == (
        Step("apt", packages=("jq",)),
        Step("pip", packages=("cowsay==6.1",)),
        Step("copy", src="notes.txt", dest="/srv/notes/notes.txt", mode=0o600),
        Step("run", command="echo built > /srv/notes/built"),
    )
    assert spec.services == (
        Service("web", "python3 -m http.server 8080", "/srv/notes", "on-failure"),
    )
    assert spec.ready == Ready(port=8080, timeout=30.0)
    assert spec.env == {"NOTES_DIR": "/srv/notes"} and spec.ports == (8080,)
    assert spec.build_allow == ("deb.debian.org", "pypi.org") and spec.allow == ("api.github.com",)


def test_the_shipped_example_reads() -> None:
    spec = parse(EXAMPLE.read_text(), str(EXAMPLE))
    kinds = [s.kind for s in spec.steps]
    assert {"apt", "pip", "copy", "run"} <= set(kinds) and spec.services


def _with(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new, 1)


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        (_with('base = "base"', 'base = "Base"'), 1, "base template"),
        (_with("idle_timeout = 600", "idle_timeout = -1"), 3, "idle_timeout"),
        (_with("ports = [8080]", "ports = [0]"), 5, "port"),
        (_with('NOTES_DIR = "/srv/notes"', '"1BAD" = "x"'), 6, "env"),
        (_with("vcpus = 2", "vcpus = 0"), 9, "vcpus"),
        (_with("disk_gib = 8", "disk_gib = true"), 11, "disk_gib"),
        (_with('apt = ["jq"]', 'apt = ["jq; rm -rf /"]'), 17, "not a valid entry"),
        (_with('apt = ["jq"]', "apt = []"), 17, "no package"),
        (_with('pip = ["cowsay==6.1"]', 'pip = ["x"]\nrun = "y"'), 19, "exactly one"),
        (_with('copy = "notes.txt"', 'copy = "../../etc/shadow"'), 23, "relative"),
        (_with('to = "/srv/notes/notes.txt"', 'to = "srv/x"'), 24, "absolute"),
        (_with('mode = "0600"', 'mode = "rwx"'), 25, "octal"),
        (_with('restart = "on-failure"', 'restart = "sometimes"'), 34, "restart"),
        (_with('cwd = "/srv/notes"', "cwd = 7"), 33, "cwd"),
        (_with("port = 8080\ntimeout", 'port = 8080\ncommand = "true"\ntimeout'), 36, "either"),
        (_with("[build]", "[build]\nsecret = 1"), 14, "unknown key 'secret'"),
        ("surprise = 1\n" + GOOD, 1, "unknown key 'surprise'"),
        (GOOD + "surprise = 1\n", 39, "unknown key 'surprise'"),  # inside [ready]
        (_with("vcpus = 2", "vcpus = = 2"), 9, "not valid TOML"),
        (_with('pip = ["cowsay==6.1"]', 'pip = ["x"]\nvenv = "opt/x"'), 21, "absolute"),
        (_with('apt = ["jq"]', 'apt = ["jq"]\nvenv = "/opt/x"'), 18, "unknown key 'venv'"),
    ],
)
def test_a_bad_spec_says_where_and_why(text: str, line: int, reason: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse(text, "sanbox.toml")
    assert reason in caught.value.reason, caught.value
    assert caught.value.line == line, caught.value
    assert str(caught.value).startswith(f"sanbox.toml:{line}: ")


def test_a_pip_step_may_install_into_a_venv() -> None:
    spec = parse(_with('pip = ["cowsay==6.1"]', 'pip = ["cowsay==6.1"]\nvenv = "/opt/cow"'))
    assert spec.steps[1] == Step("pip", packages=("cowsay==6.1",), venv="/opt/cow")
    assert spec.steps[1].describe() == "pip install cowsay==6.1 into /opt/cow"
    assert parse(GOOD).steps[1].describe() == "pip install cowsay==6.1"


def test_npm_steps_take_scoped_packages_and_other_steps_do_not() -> None:
    npm = '[[steps]]\nnpm = ["@openai/codex@0.46.0", "typescript@5"]\n'
    spec = parse(_with('pip = ["cowsay==6.1"]', 'pip = ["cowsay==6.1"]\n' + npm))
    assert Step("npm", packages=("@openai/codex@0.46.0", "typescript@5")) in spec.steps
    for bad in ('npm = ["@Scope/x"]', 'npm = ["@/x"]', 'npm = ["@x/-y"]', 'apt = ["@x/y"]'):
        with pytest.raises(SpecError, match="not a valid entry"):
            parse(_with('apt = ["jq"]', bad))


def test_two_services_of_one_name_are_refused() -> None:
    text = GOOD + '\n[[services]]\nname = "web"\ncommand = "true"\n'
    with pytest.raises(SpecError, match="same name"):
        parse(text)


def test_a_step_without_a_venv_keeps_the_key_it_had() -> None:
    """Fields added to steps later count in a step's key only when set: the layers built before
    them stay valid."""
    plain = Step("pip", packages=("cowsay==6.1",))
    assert "venv" not in step_content(plain, {})
    assert step_content(Step("pip", packages=("x",), venv="/opt/x"), {})["venv"] == "/opt/x"


def test_a_run_step_is_keyed_by_the_environment_it_runs_with() -> None:
    """`env = {A = "1"}` then `"2"`: the run step that reads $A runs again (it was reused, its
    file saying 1); a spec without env keeps the keys it had."""

    def spec(env: str) -> Spec:
        return parse(f'name = "t"\n{env}\n[[steps]]\nrun = "echo $A > /etc/a"\n')

    one = step_keys("org_a", "image:b1", spec('env = {A = "1"}'), {})
    two = step_keys("org_a", "image:b1", spec('env = {A = "2"}'), {})
    assert one[0] != two[0]
    run = Step("run", command="echo $A > /etc/a")
    assert "env" not in step_content(run, {}) and "env" not in step_content(run, {}, {})
