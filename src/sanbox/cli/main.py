"""Entry point of the `sanbox` command: the one place errors become one line, and the way each
command goes.

Loading typer, rich and every command's module, and typer's parameter conversion (it loads
pydantic), cost ~0.2-0.3 s before any command. So, by argv:

- `sanbox exec NAME [options] -- CMD`, `sanbox shell NAME` and `sanbox ssh-proxy NAME` (run by
  ssh for every connection) in their plain forms run straight away (sanbox.cli.fastpath);
- the common client commands in their plain forms (`ls`, `get NAME`, `stop NAME`,
  `snapshot ls`...) run without typer (sanbox.cli.quick);
- `sanbox [COMMAND...] --help` prints what it printed last time when nothing it depends on
  changed (sanbox.cli.help_cache), else renders as below and keeps the answer;
- any other command runs in a typer app that holds only its own module's commands
  (sanbox.cli.registry);
- anything else (`--help`, no command, an unknown one) goes to the whole typer app
  (sanbox.cli.app).

Whichever way, a command says and does what the whole typer app does, which behaves exactly as
always; with SANBOX_CLI_EAGER=1 every argv goes to it (the benchmark and the tests compare them).

The console script is `run`: the collector waits while the modules load (nothing they make is
garbage: ~6 ms of needless passes), and a quick or fast-path command, once done and its output
flushed, ends the process at once (`_end`): freeing every module it loaded cost ~14 ms more, and
nothing it did needs it (its files and connections are closed; it registers no exit work). The
typer app's commands (a server among them) end as Python ends any program.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from typing import TYPE_CHECKING, Any, NoReturn, TypeGuard

from .fastpath import parse_exec, parse_proxy, run_exec, run_proxy

if TYPE_CHECKING:
    from ..host.errors import HostError
    from .app import app as app

EAGER = "SANBOX_CLI_EAGER"
_ending = {"now": False}  # set by `run`: a quick command ends the process when done


def run() -> None:
    """The `sanbox` command as installed: `main`, the collector held while modules load and a
    quick command's process ended as soon as it is done."""
    gc.disable()
    _ending["now"] = True
    main()


def _collect() -> None:
    """The modules are loaded: under `run`, the collector runs again, over what is made from
    here on (what loading made is left out of its passes)."""
    if _ending["now"]:
        gc.freeze()
        gc.enable()


def _end(code: int) -> NoReturn:
    """A quick or fast-path command's end: at once under `run` (its output flushed first),
    else as `sys.exit` (in a test's process)."""
    if _ending["now"]:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # a closed or broken stdout
                stream.flush()
        os._exit(code)
    sys.exit(code)


def main() -> None:
    # httpx's __init__ imports httpx's own command-line client when click, rich and pygments are
    # installed (~70 ms); this process never runs it. A None in sys.modules makes that import
    # fail, and httpx defines a stub instead (its documented fallback without the `cli` extra).
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
    from ..sdk.errors import SanboxError

    try:
        if os.environ.get(EAGER) == "1":
            _collect()
            from .app import app

            app()
        else:
            _run(sys.argv[1:])
    except SanboxError as exc:
        _fail(exc.code, exc.message)
    except KeyboardInterrupt:
        _fail("interrupted", "interrupted", 130)
    except OSError as exc:  # a local file (`cp`'s): the server was reached
        where = f"{exc.filename}: " if exc.filename else ""
        _fail("local_error", f"{where}{exc.strerror or exc}")
    except Exception as exc:
        if not _is_host_error(exc):
            raise
        _fail(exc.code, str(exc))


def _run(argv: list[str]) -> None:
    exec_args = parse_exec(argv)
    if exec_args is not None:
        _collect()
        _end(run_exec(exec_args))
    proxied = parse_proxy(argv)
    if proxied is not None:
        _collect()
        _end(run_proxy(proxied))
    if argv and argv[-1] == "--help":
        from . import help_cache

        if help_cache.wanted(argv):
            _collect()
            sys.exit(help_cache.answer(argv, lambda: _typer(argv)))
    from . import quick

    found = quick.find(argv)
    _collect()
    if found is not None:
        _end(quick.run(*found))
    _typer(argv)


def _typer(argv: list[str]) -> None:
    """Run `argv` in a typer app: its command's module alone, else the whole app."""
    from .registry import module_of, typer_app

    module = module_of(argv[0]) if argv else None
    if module is None:
        from .app import app

        app()
        return
    import typer.main

    typer.main.get_group(typer_app([module]))()


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
