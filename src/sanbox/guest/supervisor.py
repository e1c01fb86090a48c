"""The services supervisor proper (``services.py`` is its entry point): one ``Runner`` per service,
the ``Supervisor`` that reads the configuration and applies it, on asyncio.

A service's process group is one unit, as systemd's control group is: when its ``sh`` ends,
whatever it left in the group is killed before a restart. SIGTERM stops every service (TERM to the
group, KILL after 5 s) and exits. Services left behind by a supervisor that was killed (their
status says running, their ``sh`` is still the same process) are killed at start, then started
anew, so a restarted supervisor never runs a service twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from typing import Any

from . import fdio
from .process import exit_watch, kill_group
from .service_config import (
    MAX_FILE,
    Backoff,
    ConfigError,
    ServicesConfig,
    ServiceSpec,
    describe_exit,
    exit_record,
    load_config,
    restart_wanted,
)
from .service_files import (
    ServiceLog,
    ServicePaths,
    remove_status,
    start_ticks,
    status_files,
    write_status,
)

log = logging.getLogger("sanbox.services")

STOP_GRACE = 5.0  # seconds between TERM and KILL when a service is stopped
DRAIN = 1.0  # seconds to read what a service wrote just before it ended (its group is gone)
CHUNK = 64 * 1024
SIGNALS = {signal.SIGHUP, signal.SIGTERM, signal.SIGINT}
NO_START = 127  # a service whose sh could not even be started counts as this exit code


class Runner:
    """One service: start it, log its output, restart it by its policy until stopped."""

    def __init__(self, spec: ServiceSpec, env: dict[str, str], where: ServicePaths) -> None:
        self.spec = spec
        self.env = env
        self.where = where
        self.status: dict[str, Any] = {
            "name": spec.name,
            "state": "running",
            "pid": None,
            "restarts": 0,
            "last_exit": None,
            "started_at": None,
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self._stopping = False
        self._wake = asyncio.Event()
        self._log = ServiceLog(where.log(spec.name))
        self.task = asyncio.get_running_loop().create_task(self._run())
        self.task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("%s: its runner failed", self.spec.name, exc_info=exc)

    def _set(self, **changes: Any) -> None:
        self.status.update(changes)
        try:
            write_status(self.where, self.status)
        except OSError as exc:
            log.warning("%s: cannot write its status: %s", self.spec.name, exc)

    async def _run(self) -> None:
        backoff = Backoff()
        loop = asyncio.get_running_loop()
        ended: dict[str, Any] = {"pid": None, "proc_start": None}
        try:
            while not self._stopping:
                started = loop.time()
                code = await self._run_once()
                ended = {"last_exit": exit_record(code), "pid": None, "proc_start": None}
                if self._stopping:
                    break
                if not restart_wanted(self.spec.restart, code):
                    self._note(f"exited ({describe_exit(code)}), not restarted")
                    self._set(state="exited", **ended)
                    return
                delay = backoff.next_delay(loop.time() - started)
                self._note(f"exited ({describe_exit(code)}), restarting in {delay:g}s")
                self._set(state="backoff", **ended)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._wake.wait()
                if not self._stopping:
                    self.status["restarts"] += 1
            self._set(state="stopped", **ended)
        finally:
            self._log.close()

    def _note(self, text: str) -> None:
        self._log.write(f"[sanbox] {self.spec.name} {text}\n".encode())

    async def _run_once(self) -> int:
        """Run the command once, to its end; its exit code (negative: the signal)."""
        try:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", self.spec.command],
                cwd=self.spec.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            where = f"cwd {self.spec.cwd}" if exc.filename == self.spec.cwd else "/bin/sh"
            self._note(f"could not start: {where}: {exc.strerror or exc}")
            return NO_START
        self.proc = proc
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        os.set_blocking(fd, False)
        self._set(
            state="running", pid=proc.pid, started_at=time.time(), proc_start=start_ticks(proc.pid)
        )
        pump = asyncio.get_running_loop().create_task(self._pump(fd))
        try:
            code = (await exit_watch(proc)).code
        finally:
            kill_group(proc.pid, signal.SIGKILL)  # what the service left in its group
            await asyncio.wait([pump], timeout=DRAIN)  # what it wrote just before it ended
            pump.cancel()
            await asyncio.wait([pump])
            proc.stdout.close()
            self.proc = None
        return code

    async def _pump(self, fd: int) -> None:
        with contextlib.suppress(OSError):
            while chunk := await fdio.read(fd, CHUNK):
                self._log.write(chunk)
                await asyncio.sleep(0)  # a flood must not starve the other services and signals

    async def stop(self) -> None:
        """TERM the service's group, KILL it after 5 s; returns once the runner has ended."""
        self._stopping = True
        self._wake.set()
        proc = self.proc
        if proc is not None:
            kill_group(proc.pid, signal.SIGTERM)
            _done, pending = await asyncio.wait([self.task], timeout=STOP_GRACE)
            if pending:
                kill_group(proc.pid, signal.SIGKILL)
        await asyncio.wait([self.task])  # a runner that failed was logged by _ended

    def kill(self) -> None:
        """At once, without waiting (the supervisor is failing)."""
        if self.proc is not None:
            kill_group(self.proc.pid, signal.SIGKILL)


class Supervisor:
    def __init__(self, where: ServicePaths) -> None:
        self.where = where
        self.runners: dict[str, Runner] = {}

    def read_config(self) -> ServicesConfig | None:
        """The file's services; an empty set if there is no file; ``None`` (keep what runs) if the
        file is unusable as a whole."""
        try:
            with open(self.where.config, "rb") as f:
                text = f.read(MAX_FILE + 1)  # a bigger one is refused by load_config
        except FileNotFoundError:
            return ServicesConfig()
        except OSError as exc:
            log.error("cannot read %s: %s; services left as they are", self.where.config, exc)
            return None
        try:
            config, problems = load_config(text)
        except ConfigError as exc:
            log.error("%s: %s; services left as they are", self.where.config, exc)
            return None
        for problem in problems:
            log.error("%s: %s", self.where.config, problem)
        return config

    async def apply(self, config: ServicesConfig) -> None:
        env = config.process_env()
        wanted = {spec.name: spec for spec in config.services}
        gone = [r for name, r in self.runners.items() if wanted.get(name) != r.spec or r.env != env]
        await asyncio.gather(*(r.stop() for r in gone))
        for runner in gone:
            del self.runners[runner.spec.name]
            if runner.spec.name not in wanted:
                remove_status(self.where, runner.spec.name)
                log.info("stopped %s", runner.spec.name)
        for name, spec in wanted.items():
            if name not in self.runners:
                log.info("starting %s: %s", name, spec.command[:200])
                self.runners[name] = Runner(spec, env, self.where)

    def clear_leftovers(self) -> None:
        """Kill what a dead supervisor left running, forget its statuses."""
        for name, data in status_files(self.where):
            pid, ticks = data.get("pid"), data.get("proc_start")
            if isinstance(pid, int) and pid > 1 and ticks is not None and start_ticks(pid) == ticks:
                log.warning("killing %s (pid %d), left by a supervisor that died", name, pid)
                kill_group(pid, signal.SIGKILL)
            remove_status(self.where, name)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        signals: asyncio.Queue[int] = asyncio.Queue()
        for each in SIGNALS:
            loop.add_signal_handler(each, signals.put_nowait, int(each))
        # services.py blocked these until now: one that came meanwhile is handled here
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
        self.clear_leftovers()
        received = int(signal.SIGHUP)
        while received == signal.SIGHUP:
            if (config := self.read_config()) is not None:
                await self.apply(config)
            received = await signals.get()
        log.info("stopping every service (%s)", signal.Signals(received).name)
        await asyncio.gather(*(r.stop() for r in self.runners.values()))

    def kill_all(self) -> None:
        for runner in self.runners.values():
            runner.kill()


def supervise(where: ServicePaths) -> None:
    """Run the services of ``where`` until SIGTERM or SIGINT."""
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="sanbox-services %(levelname)s %(message)s"
    )
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    supervisor = Supervisor(where)
    try:
        asyncio.run(supervisor.run())
    except BaseException:
        supervisor.kill_all()
        raise
