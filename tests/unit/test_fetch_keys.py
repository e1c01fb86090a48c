"""Package fetching, the pure parts: content keys that name a bundle, the host commands built from
a step (no package name can pass for an option, apt never touches the host's own state), the
errors read out of the tools' output, and the scripts the guest runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from sanbox.templates import fetch_apt, fetch_npm, fetch_pip, pip_guard
from sanbox.templates.fetch_common import FetchError, check_names, content_key, install_argv

pytestmark = pytest.mark.unit

SOURCES = [
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
]


def test_apt_key_depends_on_packages_and_guest_status_not_order_or_mirror() -> None:
    key = fetch_apt.apt_key(["jq", "curl"], b"Package: a\n", SOURCES)
    assert key == fetch_apt.apt_key(["curl", "jq", "jq"], b"Package: a\n", SOURCES)
    mirrored = [s.replace("deb.debian.org", "mirror.example") for s in SOURCES]
    assert key == fetch_apt.apt_key(["jq", "curl"], b"Package: a\n", mirrored)
    assert key != fetch_apt.apt_key(["jq"], b"Package: a\n", SOURCES)
    assert key != fetch_apt.apt_key(["jq", "curl"], b"Package: b\n", SOURCES)
    assert key != fetch_apt.apt_key(["jq", "curl"], b"Package: a\n", SOURCES[:1])
    assert len(key) == 64 and int(key, 16) >= 0


def test_spellings_of_one_pip_request_share_a_bundle() -> None:
    assert fetch_pip.pip_key(["Torch"]) == fetch_pip.pip_key(["torch"])
    assert fetch_pip.pip_key(["Foo_Bar[B,a] >=1,<2"]) == fetch_pip.pip_key(["foo.bar[a,b]<2,>=1"])
    assert fetch_pip.pip_key(["torch==2"]) != fetch_pip.pip_key(["torch"])
    assert fetch_pip.normal_requirement("Six; python_version >= '3'") == (
        'six; python_version >= "3"'
    )


def test_keys_of_different_kinds_never_collide() -> None:
    assert fetch_pip.pip_key(["six"]) != fetch_npm.npm_key(["six"])
    assert content_key("pip", {"a": 1}) != content_key("npm", {"a": 1})
    assert fetch_pip.pip_key(["six", "idna"]) == fetch_pip.pip_key(["idna", "six"])
    assert fetch_npm.npm_key(["a", "b"]) == fetch_npm.npm_key(["b", "a"])


@pytest.mark.parametrize("name", ["-oDir::Etc=/tmp/evil", "--index-url=http://x", "", "a b"])
def test_a_package_name_that_looks_like_an_option_is_refused(name: str) -> None:
    with pytest.raises(FetchError, match="not a package name"):
        check_names("apt", [name])


def test_an_empty_step_is_refused() -> None:
    with pytest.raises(FetchError, match="no package"):
        check_names("npm", [])


def test_apt_reads_and_writes_only_private_folders(tmp_path: Path) -> None:
    options = fetch_apt.apt_options(
        etc=tmp_path / "etc",
        lists=tmp_path / "lists",
        state=tmp_path / "state",
        cache=tmp_path / "cache",
        status=tmp_path / "status",
    )
    pairs = dict(o.split("=", 1) for o in options[1::2])
    assert options[::2] == ["-o"] * len(pairs)
    for name in (
        "Dir::State",
        "Dir::State::Lists",
        "Dir::State::status",
        "Dir::Cache",
        "Dir::Cache::archives",
        "Dir::Etc::SourceList",
        "Dir::Etc::SourceParts",
        "Dir::Etc::Preferences",
        "Dir::Etc::PreferencesParts",
    ):
        assert pairs[name].startswith(str(tmp_path)), name
    assert pairs["Dir::State::status"] == str(tmp_path / "status")
    assert pairs["APT::Architecture"] == "amd64"
    argv = fetch_apt.download_argv(["jq"], options)
    assert argv[0] == "apt-get" and "--download-only" in argv
    assert argv[-2:] == ["--", "jq"]  # names after `--`: never read as options


def test_source_list_pins_the_debian_keyring() -> None:
    text = fetch_apt.source_list(SOURCES, Path("/k.gpg"))
    assert text.splitlines()[0] == (
        "deb [signed-by=/k.gpg] http://deb.debian.org/debian bookworm main"
    )
    assert fetch_apt.source_list(SOURCES, None) == "\n".join(SOURCES) + "\n"


def test_apt_errors_name_the_missing_packages() -> None:
    output = """Reading package lists...
E: Unable to locate package nosuch
E: Package 'virtual-only' has no installation candidate
E: Version '9.9' for 'jq' was not found
E: Unable to locate package nosuch"""
    assert fetch_apt.missing_packages(output) == ["nosuch", "virtual-only", "jq"]
    assert fetch_apt.missing_packages("E: Sub-process returned an error code") == []


def test_apt_install_script_installs_only_its_debs_offline() -> None:
    script = fetch_apt.install_script(["jq"], ["jq_1.6_amd64.deb"])
    assert "Dir::Etc::SourceList=/dev/null" in script and "Dir::State::Lists=" in script
    assert '"$here"/debs/*.deb' in script and script.startswith("#!/bin/sh\n")
    nothing = fetch_apt.install_script(["jq"], [])
    assert "apt-get" not in nothing and "already installed" in nothing


def test_pip_downloads_wheels_for_the_guests_python_only() -> None:
    argv = fetch_pip.download_argv("/usr/bin/python3", ["six==1.17.0"], Path("/w"))
    assert argv[:3] == ["/usr/bin/python3", "-I", "-c"] and argv[4] == "download"
    assert argv[3] == Path(pip_guard.__file__).read_text()  # pip runs under the guard
    assert "--only-binary=:all:" in argv and argv[-2:] == ["--", "six==1.17.0"]
    assert argv[argv.index("--python-version") + 1] == "3.11"
    tags = fetch_pip.platforms()
    assert tags[0] == "manylinux_2_36_x86_64" and "manylinux_2_17_x86_64" in tags
    assert "manylinux_2_37_x86_64" not in tags  # newer than the guest's glibc
    assert all(argv[argv.index(t) - 1] == "--platform" for t in tags)


def test_pip_errors_say_what_to_do() -> None:
    out = "ERROR: No matching distribution found for nosuchpkg==1.0\n"
    assert "'nosuchpkg==1.0'" in fetch_pip.failure_reason(["nosuchpkg==1.0"], out)
    # an unknown failure's own words (addresses, proxy errors) go to the server's log only
    raw = "ERROR: HTTPSConnectionPool(host='10.0.0.7', port=3128): network down at /root/x"
    reason = fetch_pip.failure_reason(["six"], raw)
    assert "could not fetch six from the package registry" in reason
    assert "10.0.0.7" not in reason and "/root" not in reason and "network down" not in reason


def test_pip_install_script_runs_pip_from_its_wheel_offline() -> None:
    script = fetch_pip.install_script(["six", "a b"], "pip-26.0-py3-none-any.whl")
    assert '"$here/pip/pip-26.0-py3-none-any.whl/pip" install --no-index' in script
    assert "--break-system-packages" in script and "--prefix" not in script
    assert "-- six 'a b'" in script  # quoted for the shell


def test_pip_into_a_venv_makes_it_and_installs_with_its_python() -> None:
    script = fetch_pip.install_script(["six"], "pip-26.0-py3-none-any.whl", "/opt/my env")
    assert "venv='/opt/my env'" in script  # quoted for the shell
    assert 'python3 -m venv --without-pip "$venv"' in script
    assert 'exec "$venv/bin/python3" "$here/pip/pip-26.0-py3-none-any.whl/pip" install' in script
    assert "--break-system-packages" not in script
    assert fetch_pip.pip_key(["six"], "/opt/x") != fetch_pip.pip_key(["six"])
    assert fetch_pip.pip_key(["six"], "/opt/x") != fetch_pip.pip_key(["six"], "/opt/y")


def test_npm_never_runs_install_scripts_on_the_host() -> None:
    argv = fetch_npm.resolve_argv(Path("/p"), ["is-number"])
    assert "--ignore-scripts" in argv and argv[argv.index("--prefix") + 1] == "/p"
    assert "--package-lock-only" in argv and argv[-2:] == ["--", "is-number"]
    argv = fetch_npm.install_argv(Path("/p"))  # the checked lockfile, no package named
    assert argv[:2] == ["npm", "install"] and "--ignore-scripts" in argv and "--" not in argv


def test_npm_commands_link_into_the_global_bin_and_nowhere_else() -> None:
    assert fetch_npm.bin_link("../is-number/cli.js") == "../lib/node_modules/is-number/cli.js"
    assert fetch_npm.bin_link("../@s/p/bin/x") == "../lib/node_modules/@s/p/bin/x"
    for out_of_tree in ("/etc/passwd", "../../x/y", "../p/../../etc", "cli.js", "../p"):
        assert fetch_npm.bin_link(out_of_tree) is None


def test_npm_errors_name_the_missing_package() -> None:
    out = (
        "npm error code E404\nnpm error 404 Not Found - GET https://registry.npmjs.org/"
        "@scope%2fnosuch - Not found\n"
    )
    assert "'@scope/nosuch'" in fetch_npm.failure_reason(["@scope/nosuch"], out)
    out = "npm error 404  The requested resource 'nosuch@*' could not be found or you do not"
    assert "'nosuch@*'" in fetch_npm.failure_reason(["nosuch"], out)


def test_npm_install_script_refuses_plainly_without_node() -> None:
    script = fetch_npm.install_script(["is-number"])
    assert "command -v node" in script and "add an apt step with nodejs" in script
    assert "-C /usr/local" in script


def test_the_guest_runs_the_script_from_the_bundles_folder() -> None:
    key = "ab" * 32
    assert install_argv(key) == ("/bin/sh", f"/var/tmp/sanbox-fetch/{key[:16]}/install.sh")
