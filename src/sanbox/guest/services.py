"""The supervisor of a template's services: ``python3 -S -u -m sanbox_guest.services``.

init.sh starts it next to the agent, each in its own restart loop, so an agent restart leaves
services alone. It reads ``/etc/sanbox/services.json`` (``service_config.py``) at start and again on
SIGHUP: new services start, removed ones stop, changed ones restart. Each service runs as
``/bin/sh -c COMMAND`` in its ``cwd``, in a session of its own, with stdin ``/dev/null`` and a
clean environment plus the file's ``env``; its output comes through a pipe into its bounded log,
and its status goes to a file after every change (``service_files.py``, ``supervisor.py``).

init.sh starts it under SCHED_IDLE (``chrt --idle``: CPU only when nothing else wants it) so that it
does not slow the agent's start. With no file (and nothing left by an earlier supervisor) it only
waits for a signal, in that class. With something to run it takes the normal class back (services
inherit it), and only then loads the supervisor proper, asyncio and all.
"""

from __future__ import annotations

import contextlib
import os
import signal

from .service_files import ServicePaths, paths

SIGNALS = {signal.SIGHUP, signal.SIGTERM, signal.SIGINT}


def anything_to_run(where: ServicePaths) -> bool:
    """A configuration, or statuses of services a supervisor before this one started."""
    if os.path.exists(where.config):
        return True
    try:
        return any(not entry.startswith(".") for entry in os.listdir(where.status_dir))
    except OSError:
        return False


def main() -> None:
    where = paths()
    # blocked, not handled: a SIGHUP waits here until it is taken, and the supervisor unblocks
    # them once its own handlers are in place
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    while not anything_to_run(where):
        if signal.sigwait(SIGNALS) != signal.SIGHUP:
            return
    with contextlib.suppress(OSError):  # leave the idle class; services inherit the class
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    from .supervisor import supervise  # asyncio and the rest: only with services to run

    supervise(where)


if __name__ == "__main__":
    main()
