"""Firecracker's API: HTTP over its Unix socket. Each builder is pure and returns the call as
(method, path, body); `ENDPOINTS` lists every (method, path) this driver uses, and the unit tests
check each one and each body against Firecracker's published API spec. `FirecrackerApi` sends
them (httpx over the socket) and turns a refusal into FirecrackerApiError with Firecracker's
own `fault_message`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import httpx

from .errors import FirecrackerApiError

MAX_RESPONSE = 1024 * 1024  # Firecracker's answers are small JSON documents


class ApiCall(NamedTuple):
    method: str
    path: str
    body: dict[str, Any] | None


ENDPOINTS = frozenset(
    {
        ("GET", "/"),
        ("GET", "/version"),
        ("GET", "/vm/config"),
        ("GET", "/machine-config"),
        ("PUT", "/machine-config"),
        ("PATCH", "/vm"),
        ("PUT", "/actions"),
        ("PUT", "/snapshot/create"),
        ("PUT", "/snapshot/load"),
        ("PUT", "/balloon"),
        ("PATCH", "/balloon"),
        ("PATCH", "/drives/{drive_id}"),
    }
)


def endpoint_of(call: ApiCall) -> tuple[str, str]:
    """The call's (method, path template) as the spec names it. Pure."""
    if call.path.startswith("/drives/"):
        return call.method, "/drives/{drive_id}"
    return call.method, call.path


def instance_info() -> ApiCall:
    """`GET /`: id, state (`Not started`, `Running`, `Paused`), vmm_version."""
    return ApiCall("GET", "/", None)


def version() -> ApiCall:
    return ApiCall("GET", "/version", None)


def vm_config() -> ApiCall:
    """`GET /vm/config`: the configuration Firecracker runs, in the config file's shape."""
    return ApiCall("GET", "/vm/config", None)


def machine_config() -> ApiCall:
    return ApiCall("GET", "/machine-config", None)


def set_machine_config(vcpus: int, memory_mib: int) -> ApiCall:
    """Pre-boot only (a VM started without a config file)."""
    return ApiCall(
        "PUT",
        "/machine-config",
        {"vcpu_count": vcpus, "mem_size_mib": memory_mib, "smt": False},
    )


def pause() -> ApiCall:
    return ApiCall("PATCH", "/vm", {"state": "Paused"})


def resume() -> ApiCall:
    return ApiCall("PATCH", "/vm", {"state": "Resumed"})


def start() -> ApiCall:
    """Boot a VM configured through the API (one started with a config file boots by itself)."""
    return ApiCall("PUT", "/actions", {"action_type": "InstanceStart"})


def ctrl_alt_del() -> ApiCall:
    """Ask the guest to shut down (x86: the keyboard controller's Ctrl+Alt+Del)."""
    return ApiCall("PUT", "/actions", {"action_type": "SendCtrlAltDel"})


def create_snapshot(snapshot: Path, memory: Path) -> ApiCall:
    """A full snapshot of a paused VM: the device state to `snapshot`, guest RAM to `memory`."""
    body = {"snapshot_type": "Full", "snapshot_path": str(snapshot), "mem_file_path": str(memory)}
    return ApiCall("PUT", "/snapshot/create", body)


def load_snapshot(
    snapshot: Path,
    memory: Path,
    resume_vm: bool = True,
    vsock: Path | None = None,
    taps: tuple[tuple[str, str], ...] = (),
) -> ApiCall:
    """Load a snapshot into a fresh Firecracker process. The memory file is mapped privately
    (`File` backend: MAP_PRIVATE, copy-on-write, pages read as the guest touches them), so VMs
    restored from one file share its clean pages and never write to it. `vsock` and `taps`
    (iface_id, host tap) move the restored VM's sockets and taps where this VM has them."""
    body: dict[str, Any] = {
        "snapshot_path": str(snapshot),
        "mem_backend": {"backend_type": "File", "backend_path": str(memory)},
        "resume_vm": resume_vm,
    }
    if vsock is not None:
        body["vsock_override"] = {"uds_path": str(vsock)}
    if taps:
        body["network_overrides"] = [{"iface_id": i, "host_dev_name": t} for i, t in taps]
    return ApiCall("PUT", "/snapshot/load", body)


def set_balloon(amount_mib: int, deflate_on_oom: bool = True) -> ApiCall:
    """Pre-boot: a balloon device (the host can take back `amount_mib` of guest RAM)."""
    return ApiCall("PUT", "/balloon", {"amount_mib": amount_mib, "deflate_on_oom": deflate_on_oom})


def resize_balloon(amount_mib: int) -> ApiCall:
    return ApiCall("PATCH", "/balloon", {"amount_mib": amount_mib})


def update_drive(drive_id: str, path: Path) -> ApiCall:
    """Post-boot: the drive's file again, after it was grown: Firecracker reads its new size
    and tells the guest."""
    return ApiCall(
        "PATCH", f"/drives/{drive_id}", {"drive_id": drive_id, "path_on_host": str(path)}
    )


def fault_of(status: int, text: str) -> str:
    """Firecracker's words for a refused call: its `{"fault_message": ...}`, else the text. Pure."""
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    fault = doc.get("fault_message") if isinstance(doc, dict) else None
    if isinstance(fault, str):
        return fault[:2000]
    return text.strip()[:500] or f"HTTP {status}"


class FirecrackerApi:
    """A client of one Firecracker's API socket."""

    def __init__(self, socket: Path, timeout: float = 10.0) -> None:
        self.socket = socket
        self.timeout = timeout

    async def send(self, call: ApiCall, timeout: float | None = None) -> Any:
        """The answer's JSON (None for 204); FirecrackerApiError if refused or unreachable."""
        if endpoint_of(call) not in ENDPOINTS:
            raise FirecrackerApiError(f"{call.method} {call.path} is not a call this driver makes")
        transport = httpx.AsyncHTTPTransport(uds=str(self.socket))
        limit = self.timeout if timeout is None else timeout
        try:
            async with httpx.AsyncClient(
                transport=transport, base_url="http://localhost", timeout=limit
            ) as client:
                response = await client.request(call.method, call.path, json=call.body)
        except httpx.HTTPError as exc:
            raise FirecrackerApiError(
                f"{call.method} {call.path}: the API socket {self.socket} did not answer: {exc}"
            ) from exc
        if len(response.content) > MAX_RESPONSE:
            raise FirecrackerApiError(f"{call.method} {call.path}: an oversized answer")
        if response.status_code >= 300:
            fault = fault_of(response.status_code, response.text)
            raise FirecrackerApiError(f"{call.method} {call.path} refused: {fault}")
        if response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError as exc:
            raise FirecrackerApiError(f"{call.method} {call.path}: not a JSON answer") from exc
