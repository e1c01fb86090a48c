"""Entry point of the `sanbox` command: the one place errors become one line.

`sanbox exec NAME [options] -- CMD` in its plain form skips the typer app (sanbox.cli.app) and
runs straight away (sanbox.cli.fastpath): loading typer, rich and every command's module, and
typer's parameter conversion (it loads pydantic), cost ~0.2 s of every exec. Anything else, and
any exec with a form the fast path does not know (`--help`, `--env=A=1`, a mistake), goes to
the typer app, which then behaves exactly as always.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, TypeGuard

from .fastpath import parse_exec, run_exec

if TYPE_CHECKING:
    from ..host.errors import HostError
    from .app import app as app


def main() -> None:
    # httpx's __init__ imports httpx's own command-line client when click, rich and pygments are
    # installed (~70 ms); this process never runs it. A None in sys.modules makes that import
    # fail, and httpx defines a stub instead (its documented fallback without the `cli` extra).
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
    from ..sdk.errors import SanboxError

    try:
        quick = parse_exec(sys.argv[1:])
        if quick is not None:
            sys.exit(run_exec(quick))
        from .app import app

        app()
    except SanboxError as exc:
        _fail(exc.code, exc.message)
    except KeyboardInterrupt:
        _fail("interrupted", "interrupted", 130)
    except Exception as exc:
        if not _is_host_error(exc):
            raise
        _fail(exc.code, str(exc))


def _fail(code: str, message: str, exit_code: int = 1) -> None:
    from ._output import fail  # rich: loaded when there is something to say

    fail(code, message, exit_code)


def _is_host_error(exc: Exception) -> TypeGuard[HostError]:
    """Only server-side commands import `sanbox.host`: a host error can only have been raised
    after its module was loaded, so look for it there instead of importing it."""
    errors = sys.modules.get("sanbox.host.errors")
    return errors is not None and isinstance(exc, errors.HostError)


def __getattr__(name: str) -> Any:
    if name == "app":  # `from sanbox.cli.main import app`, loaded when asked for
        from .app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
