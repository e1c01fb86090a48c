"""The sync client: `Sanbox`, `Computer`, `Files`, `ExecStream`, `SshStream` as facades over the
async core.

Each method is the async one run on a private event loop thread (`_portal.Portal`), so the
sync and async clients cannot drift apart.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx

from ._portal import Facade, Portal, SyncTransportAdapter, blocking, blocking_iter, converting
from ._websocket import WebSocketConnector, WebSocketSession
from .client import (
    DEFAULT_TIMEOUT,
    AsyncAudit,
    AsyncComputers,
    AsyncImages,
    AsyncKeys,
    AsyncOrgs,
    AsyncSanbox,
    AsyncSnapshots,
)
from .computer import AsyncComputer, AsyncFiles, ComputerFields
from .exec_stream import AsyncExecStream
from .fleet import AsyncFleet
from .secrets import AsyncSecrets
from .ssh_stream import AsyncSshStream
from .templates import AsyncPools, AsyncTemplates
from .types import ComputerRecord, ExecEvent
from .usage import AsyncUsage

S = TypeVar("S", bound=WebSocketSession)


class _Session(Facade[S]):
    """A WebSocket session used with `with`: entered and left through the portal."""

    def __enter__(self) -> Self:
        self._portal.call(self._async.__aenter__())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._portal.call(self._async.__aexit__(exc_type, exc, tb))


class ExecStream(_Session[AsyncExecStream]):
    """Use as `with computer.exec_stream(cmd) as stream: for event in stream: ...`."""

    def __iter__(self) -> Iterator[ExecEvent]:
        return self.events()

    @property
    def exit(self) -> Any:
        return self._async.exit

    events = blocking_iter(AsyncExecStream.events)
    wait = blocking(AsyncExecStream.wait)
    send_stdin = blocking(AsyncExecStream.send_stdin)
    send_eof = blocking(AsyncExecStream.send_eof)
    signal = blocking(AsyncExecStream.signal)
    resize = blocking(AsyncExecStream.resize)


class SshStream(_Session[AsyncSshStream]):
    """Use as `with computer.ssh_stream() as stream: stream.send(...); stream.recv()`."""

    send = blocking(AsyncSshStream.send)
    send_eof = blocking(AsyncSshStream.send_eof)
    recv = blocking(AsyncSshStream.recv)


class Files(Facade[AsyncFiles]):
    read = blocking(AsyncFiles.read)
    write = blocking(AsyncFiles.write)
    upload = blocking(AsyncFiles.upload)
    download = blocking(AsyncFiles.download)
    list = blocking(AsyncFiles.list)
    stat = blocking(AsyncFiles.stat)
    remove = blocking(AsyncFiles.remove)
    mkdir = blocking(AsyncFiles.mkdir)


def _same(owner: Facade[AsyncComputer], _result: AsyncComputer) -> Computer:
    assert isinstance(owner, Computer)
    return owner


class Computer(Facade[AsyncComputer], ComputerFields):
    def __init__(self, inner: AsyncComputer, portal: Portal) -> None:
        super().__init__(inner, portal)
        self.files = Files(inner.files, portal)

    @property
    def record(self) -> ComputerRecord:
        return self._async.record

    refresh = converting(AsyncComputer.refresh, _same)
    start = converting(AsyncComputer.start, _same)
    stop = converting(AsyncComputer.stop, _same)
    move = converting(AsyncComputer.move, _same)
    pause = converting(AsyncComputer.pause, _same)
    resume = converting(AsyncComputer.resume, _same)
    update = converting(AsyncComputer.update, _same)
    restart = converting(AsyncComputer.restart, _same)
    delete = converting(AsyncComputer.delete, _same)
    snapshot = blocking(AsyncComputer.snapshot)
    fork = converting(AsyncComputer.fork, lambda owner, inner: _computers(owner, inner))
    exec = blocking(AsyncComputer.exec)
    events = blocking(AsyncComputer.events)
    console = blocking(AsyncComputer.console)
    metrics = blocking(AsyncComputer.metrics)
    allowlist = blocking(AsyncComputer.allowlist)
    set_allowlist = blocking(AsyncComputer.set_allowlist)
    ports = blocking(AsyncComputer.ports)
    publish = blocking(AsyncComputer.publish)
    unpublish = blocking(AsyncComputer.unpublish)
    view_link = blocking(AsyncComputer.view_link)
    authorize_ssh_key = blocking(AsyncComputer.authorize_ssh_key)

    def ssh_stream(self) -> SshStream:
        return SshStream(self._async.ssh_stream(), self._portal)

    def exec_stream(
        self,
        cmd: str | builtins.list[str] | None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
        pty: bool = False,
        rows: int = 24,
        cols: int = 80,
        timeout: float | None = None,
    ) -> ExecStream:
        stream = self._async.exec_stream(cmd, env, cwd, user, pty, rows, cols, timeout)
        return ExecStream(stream, self._portal)


def _computer(owner: Facade[Any], inner: AsyncComputer) -> Computer:
    return Computer(inner, owner._portal)


def _computers(owner: Facade[Any], inner: list[AsyncComputer]) -> list[Computer]:
    return [Computer(c, owner._portal) for c in inner]


class Computers(Facade[AsyncComputers]):
    create = converting(AsyncComputers.create, _computer)
    list = converting(AsyncComputers.list, _computers)
    get = converting(AsyncComputers.get, _computer)


class Snapshots(Facade[AsyncSnapshots]):
    list = blocking(AsyncSnapshots.list)
    get = blocking(AsyncSnapshots.get)
    delete = blocking(AsyncSnapshots.delete)


class Templates(Facade[AsyncTemplates]):
    list = blocking(AsyncTemplates.list)
    get = blocking(AsyncTemplates.get)
    delete = blocking(AsyncTemplates.delete)
    build = blocking(AsyncTemplates.build)
    rebuild = blocking(AsyncTemplates.rebuild)
    logs = blocking_iter(AsyncTemplates.logs)
    wait = blocking(AsyncTemplates.wait)
    prune = blocking(AsyncTemplates.prune)


class Pools(Facade[AsyncPools]):
    set = blocking(AsyncPools.set)
    list = blocking(AsyncPools.list)


class Secrets(Facade[AsyncSecrets]):
    set = blocking(AsyncSecrets.set)
    list = blocking(AsyncSecrets.list)
    get = blocking(AsyncSecrets.get)
    delete = blocking(AsyncSecrets.delete)
    bind = blocking(AsyncSecrets.bind)
    unbind = blocking(AsyncSecrets.unbind)
    bindings = blocking(AsyncSecrets.bindings)


class Fleet(Facade[AsyncFleet]):
    join_token = blocking(AsyncFleet.join_token)
    hosts = blocking(AsyncFleet.hosts)
    jobs = blocking(AsyncFleet.jobs)
    move_snapshot = blocking(AsyncFleet.move_snapshot)
    get = blocking(AsyncFleet.get)
    drain = blocking(AsyncFleet.drain)
    forget = blocking(AsyncFleet.forget)


class Orgs(Facade[AsyncOrgs]):
    create = blocking(AsyncOrgs.create)
    list = blocking(AsyncOrgs.list)
    quota = blocking(AsyncOrgs.quota)
    set_quota = blocking(AsyncOrgs.set_quota)
    regions = blocking(AsyncOrgs.regions)
    set_regions = blocking(AsyncOrgs.set_regions)


class Keys(Facade[AsyncKeys]):
    create = blocking(AsyncKeys.create)
    list = blocking(AsyncKeys.list)
    revoke = blocking(AsyncKeys.revoke)


class Audit(Facade[AsyncAudit]):
    list = blocking(AsyncAudit.list)


class Usage(Facade[AsyncUsage]):
    get = blocking(AsyncUsage.get)
    csv = blocking(AsyncUsage.csv)
    events = blocking(AsyncUsage.events)


class Images(Facade[AsyncImages]):
    list = blocking(AsyncImages.list)
    prune = blocking(AsyncImages.prune)


class Sanbox(Facade[AsyncSanbox]):
    """The sync client. Same arguments as `AsyncSanbox`; `transport` may be sync or async.

    An async transport (e.g. `httpx.ASGITransport(app)`) runs on the client's private loop
    thread; a sync `httpx.BaseTransport` is called from a worker thread.
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        *,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
        ws_connector: WebSocketConnector | None = None,
    ) -> None:
        if transport is not None and not isinstance(transport, httpx.AsyncBaseTransport):
            transport = SyncTransportAdapter(transport)
        inner = AsyncSanbox(url, api_key, timeout, transport=transport, ws_connector=ws_connector)
        super().__init__(inner, Portal.shared())
        self.url = inner.url
        self.computers = Computers(inner.computers, self._portal)
        self.snapshots = Snapshots(inner.snapshots, self._portal)
        self.templates = Templates(inner.templates, self._portal)
        self.pools = Pools(inner.pools, self._portal)
        self.secrets = Secrets(inner.secrets, self._portal)
        self.orgs = Orgs(inner.orgs, self._portal)
        self.fleet = Fleet(inner.fleet, self._portal)
        self.keys = Keys(inner.keys, self._portal)
        self.images = Images(inner.images, self._portal)
        self.audit = Audit(inner.audit, self._portal)
        self.usage = Usage(inner.usage, self._portal)

    def __enter__(self) -> Sanbox:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    close = blocking(AsyncSanbox.aclose)
    host = blocking(AsyncSanbox.host)
    console_link = blocking(AsyncSanbox.console_link)
    events = blocking_iter(AsyncSanbox.events)
