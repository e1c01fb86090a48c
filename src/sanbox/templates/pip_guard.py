"""pip, run so that it never follows a direct reference a package names as a dependency.

A wheel's Requires-Dist may say `evil @ file:///some/dir` or `evil @ https://host/evil.tar.gz`.
pip refuses that itself only under a wheel from PyPI's own file host; from any other index (a
mirror, a find-links folder) it fetches the reference and, `--only-binary=:all:` or not, BUILDS
it to read its metadata (its setup.py or PEP 517 backend runs) while it resolves, before any
report exists: code a publisher wrote, run on the host as the fetch user. `fetch_pip` therefore
runs every pip command as `python -I -c <this file's text> ARGS` (`argv`): before pip starts,
`guard` wraps the function pip builds every dependency's requirement with
(`pip._internal.req.constructors.install_req_from_req_string`, where pip's own "not also hosted
on PyPI" check sits) in the module that defines it and in the one that looks it up
(`pip._internal.cli.req_command`, whose `make_resolver` hands it to both resolvers), so a
requirement with a URL that comes from another package raises pip's `InstallationError`, naming
both, before anything of it is fetched. pip then exits 1 with that line (`REFUSED`).

It fails closed: a pip outside the majors whose layout was read (`KNOWN_MAJORS`), a function
that is not where it was, or a wrapped lookup that lets a probe through, and the guard writes
`UNGUARDED` and exits 2 without running pip. Stdlib and pip only (it runs in pip's process, as
the fetch user, with `-I`: no PYTHONPATH, no user site, not the working folder), so the package
this module is part of is never imported there."""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

MARK = "sanbox-pip-guard:"
REFUSED = f"{MARK} direct reference"  # then: `'<parent>' requires '<name @ url>'`
UNGUARDED = f"{MARK} cannot guard"  # then: why (for the operator)
UNGUARDED_EXIT = 2
NAME = "install_req_from_req_string"  # what pip builds each dependency's requirement with
KNOWN_MAJORS = range(21, 27)  # pip 21.0 .. 26.x: the layout below, read in each one's source


class UnguardedError(RuntimeError):
    """This pip is not laid out as the guard knows: it must not run."""


def argv(python: str) -> list[str]:
    """The start of a guarded pip command line for `python` (its own pip); pip's arguments
    follow, as after `python -m pip`."""
    return [python, "-I", "-c", Path(__file__).read_text()]


def _url_of(req_string: str) -> str | None:
    from pip._vendor.packaging.requirements import InvalidRequirement, Requirement

    try:
        return Requirement(req_string).url
    except InvalidRequirement:
        return req_string  # unreadable: refused as if a reference (pip would refuse it too)


def _where_pip_looks(constructors: object, req_command: object, version: str) -> Callable[..., Any]:
    """`NAME` as its module defines it, if `req_command` (where pip looks it up) holds it too."""
    found = vars(constructors).get(NAME)
    if vars(req_command).get(NAME) is not found or not callable(found):
        raise UnguardedError(f"pip {version}: {NAME} is not where the guard wraps it")
    function: Callable[..., Any] = found
    return function


def guard() -> None:
    """Wrap pip's requirement construction where pip looks it up, and prove the wrap holds;
    `UnguardedError` if anything is not as known."""
    import pip

    major = pip.__version__.split(".")[0]
    if not major.isdigit() or int(major) not in KNOWN_MAJORS:
        raise UnguardedError(f"pip {pip.__version__} is not a version the guard knows")
    from pip._internal.cli import req_command
    from pip._internal.exceptions import InstallationError
    from pip._internal.req import constructors

    original = _where_pip_looks(constructors, req_command, pip.__version__)
    signature = inspect.signature(original)
    if list(signature.parameters)[:2] != ["req_string", "comes_from"]:
        raise UnguardedError(f"pip {pip.__version__}: {NAME} changed")

    @functools.wraps(original)
    def checked(*args: Any, **kwargs: Any) -> Any:
        given = signature.bind(*args, **kwargs).arguments
        req_string, comes_from = str(given["req_string"]), given.get("comes_from")
        if comes_from is not None and _url_of(req_string) is not None:
            parent = getattr(comes_from, "name", None) or str(comes_from)
            raise InstallationError(f"{REFUSED} {str(parent)[:100]!r} requires {req_string!r}")
        return original(*args, **kwargs)

    for module in list(sys.modules.values()):  # every loaded holder of it, the two known first
        if getattr(module, "__name__", "").startswith("pip."):
            for name, value in list(vars(module).items()):
                if value is original:
                    setattr(module, name, checked)
    probe_parent = constructors.install_req_from_line("sanbox-guard-probe")
    try:
        vars(req_command)[NAME]("probe @ file:///nonexistent", probe_parent)
    except InstallationError:
        return
    raise UnguardedError(f"pip {pip.__version__}: the wrapped lookup let a reference through")


def main(args: list[str]) -> int:
    try:
        guard()
    except (UnguardedError, ImportError) as exc:
        print(f"{UNGUARDED}: {exc}", file=sys.stderr)
        return UNGUARDED_EXIT
    from pip._internal.cli.main import main as pip_main

    return int(pip_main(args))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
