"""What an apt, pip or npm step may name: packages from the registry, by name, nothing else.

The host fetches these packages itself, so a step's entries are read here with each tool's own
grammar and anything that would make the tool fetch from elsewhere or change how it runs is
refused: direct references (`name @ https://...`, `git+...`, `github:u/r`, `file:`, tarball
URLs, paths, `.deb` files), options (`-e`, `--index-url`, `-r file`) and anything that is not
plain ASCII (a look-alike letter would name another package). Pure: strings in, the same strings
out or `PackageNameError` with what to write instead.

    pip:  a PEP 508 requirement without a URL: `requests`, `requests[socks]==2.32`,
          `numpy>=1.26; python_version>='3.9'` (parsed by `packaging`, as pip does)
    npm:  `name` or `@scope/name`, optionally `@version`, `@range` or `@tag`; or an alias
          to one of those (`alias@npm:@scope/name@1.2`)
    apt:  a Debian package name, optionally `=version` (or `:arch` as `name:amd64`)"""

from __future__ import annotations

import re

from packaging.requirements import InvalidRequirement, Requirement

MAX_LENGTH = 200  # characters of one entry
# pip takes an argument ending so as a local archive, not a name
ARCHIVE_SUFFIXES = (
    ".whl",
    ".zip",
    ".tar",
    ".tgz",
    ".tar.gz",
    ".tbz",
    ".tar.bz2",
    ".txz",
    ".tar.xz",
    ".tlz",
    ".tar.lz",
    ".tar.lzma",
)

# npm's own rules (validate-npm-package-name): lower case for new names, url-safe characters
_NPM_NAME = r"[a-z0-9][a-z0-9._~-]{0,213}"
_NPM_SCOPE = r"@[a-z0-9][a-z0-9._~-]{0,213}"
# a version, a range (`^1.2`, `>=1 <2`, `1.x || 2`) or a dist-tag (`latest`, `next`)
_NPM_WANTED = r"[A-Za-z0-9.*^~<>=| +-]{1,100}"
# no ':' or '/' anywhere past the scope: nothing that reads as a URL, a path, a GitHub
# shorthand (`user/repo`) or an alias (`npm:other`)
NPM_SPEC = re.compile(rf"(?:{_NPM_SCOPE}/)?{_NPM_NAME}(?:@{_NPM_WANTED})?")
# an alias to another registry package: `novnc@npm:@novnc/novnc@1.7.0` (one level, no URL)
NPM_ALIAS = re.compile(rf"(?:{_NPM_SCOPE}/)?{_NPM_NAME}@npm:(?P<target>.+)")

# Debian policy 5.6.1 (package) and 5.6.12 (version); the arch qualifier apt accepts
APT_SPEC = re.compile(
    r"(?P<name>[a-z0-9][a-z0-9.+-]{1,99})(?::(?P<arch>[a-z0-9-]{1,32}))?"
    r"(?:=(?P<version>(?:[0-9]{1,9}:)?[0-9][A-Za-z0-9.+~-]{0,99}))?"
)


class PackageNameError(ValueError):
    """An entry of a package step that names something other than a registry's package."""


def _plain(kind: str, entry: object) -> str:
    if not isinstance(entry, str):
        raise PackageNameError(f"{kind} entries are strings, not {type(entry).__name__}")
    if not entry or len(entry) > MAX_LENGTH:
        raise PackageNameError(f"a {kind} entry is 1 to {MAX_LENGTH} characters")
    if not entry.isascii() or not entry.isprintable():
        raise PackageNameError(
            f"{entry!r} has characters outside printable ASCII: write the package's name "
            "as the registry spells it"
        )
    if entry.startswith("-"):
        raise PackageNameError(
            f"{entry!r} is an option, not a package: a step lists package names only "
            "(the host chooses the registry and the options)"
        )
    return entry


def check_pip(entry: object) -> str:
    """A pip requirement: a PEP 508 name with optional extras, version specifier and marker."""
    text = _plain("pip", entry)
    if text != text.strip() or "\\" in text or "#" in text:
        raise PackageNameError(f"{text!r} is not a requirement: write `name` or `name==1.2`")
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        why = str(exc).splitlines()[0] if str(exc) else "not PEP 508"
        raise PackageNameError(
            f"{text!r} is not a requirement ({why}): write `name`, `name==1.2` or "
            "`name>=1; python_version>='3.9'`"
        ) from None
    if req.url is not None:
        raise PackageNameError(
            f"{text!r} is a direct reference ({req.name} @ a URL): the host fetches from the "
            f"package registry only; write `{req.name}` or `{req.name}==VERSION`, or fetch it "
            "in a `run` step under the build's allowlist"
        )
    if req.name.lower().endswith(ARCHIVE_SUFFIXES):
        raise PackageNameError(
            f"{text!r} reads as an archive file to pip, not a package name: write the "
            "package's name (`name==VERSION`)"
        )
    return text


def check_npm(entry: object) -> str:
    """An npm registry spec: `name`, `@scope/name`, each optionally `@version|range|tag`."""
    text = _plain("npm", entry)
    alias = NPM_ALIAS.fullmatch(text)
    wanted = alias.group("target") if alias is not None else text
    if NPM_SPEC.fullmatch(wanted) is None or text != text.strip() or text.endswith("@"):
        raise PackageNameError(
            f"{text!r} is not a registry package: write `name`, `@scope/name`, `name@1.2.3` "
            "or `alias@npm:name@1.2.3` (git, github:, http(s):, file:, link:, tarballs and "
            "paths are not fetched by the host; use a `run` step under the build's allowlist)"
        )
    return text


def check_apt(entry: object) -> str:
    """A Debian package name, optionally `:arch` and `=version`; no path, URL or .deb file."""
    text = _plain("apt", entry)
    m = APT_SPEC.fullmatch(text)
    if m is None or m.group("name").endswith((".deb", ".dsc", ".changes")):  # apt's local files
        raise PackageNameError(
            f"{text!r} is not a Debian package: write `name` or `name=version` as "
            "`apt-cache policy NAME` shows them (no paths, URLs, .deb files, globs or options)"
        )
    return text


CHECKS = {"apt": check_apt, "pip": check_pip, "npm": check_npm}


def check_all(kind: str, entries: object) -> tuple[str, ...]:
    """Every entry of a `kind` step, checked; PackageNameError for the first bad one."""
    if not isinstance(entries, list):
        raise PackageNameError(f"{kind} is a list of package names")
    return tuple(CHECKS[kind](entry) for entry in entries)
