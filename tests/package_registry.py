"""A package registry on loopback for the fetchers' tests: npm packuments and tarballs, and a pip
simple index (PEP 503) of wheels, each package's dependencies written by the test (a hostile
publisher's `file:` or git dependency too). Nothing leaves 127.0.0.1.

    with PackageRegistry() as reg:
        reg.npm("good", "1.0.0", {"dep": "^1"}, bin_={"good": "cli.js"})
        reg.wheel("six", "1.0", requires=["idna"])
        reg.npm_url, reg.pip_url   # npm_config_registry, PIP_INDEX_URL"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile
import threading
import zipfile
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote


def npm_tarball(
    name: str, version: str, deps: Mapping[str, str], bin_: Mapping[str, str], **more: object
) -> bytes:
    manifest = {
        "name": name,
        "version": version,
        "dependencies": dict(deps),
        "bin": dict(bin_),
        **more,
    }
    body = {
        "package/package.json": json.dumps(manifest).encode(),
        "package/cli.js": b"#!/usr/bin/env node\nmodule.exports = 42\n",
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path, data in body.items():
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def wheel(name: str, version: str, requires: list[str]) -> bytes:
    """A pure-Python wheel whose METADATA requires `requires` (PEP 508 lines, URLs too)."""
    dist = f"{name}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {
        f"{name}/__init__.py": b"",
        f"{dist}/METADATA": meta.encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = "".join(f"{p},,\n" for p in files) + f"{dist}/RECORD,,\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for path, data in {**files, f"{dist}/RECORD": record.encode()}.items():
            zf.writestr(path, data)
    return buf.getvalue()


class PackageRegistry:
    def __init__(self) -> None:
        self.packuments: dict[str, dict[str, dict[str, object]]] = {}
        self.blobs: dict[str, bytes] = {}  # path -> body
        self.wheels: dict[str, list[str]] = {}  # normalised name -> file names
        self.requests: list[str] = []
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: object) -> None:
                registry.requests.append(self.path)

            def do_GET(self) -> None:
                status, body, kind = registry.answer(unquote(self.path))
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def npm_url(self) -> str:
        return f"{self.base}/npm/"

    @property
    def pip_url(self) -> str:
        return f"{self.base}/simple/"

    def npm(
        self,
        name: str,
        version: str,
        deps: Mapping[str, str] | None = None,
        bin_: Mapping[str, str] | None = None,
        optional: Mapping[str, str] | None = None,
        os_: list[str] | None = None,
    ) -> None:
        """A package, with optional dependencies and the platforms it installs on if given."""
        more: dict[str, object] = {}
        if optional:
            more["optionalDependencies"] = dict(optional)
        if os_:
            more["os"] = list(os_)
        data = npm_tarball(name, version, deps or {}, bin_ or {}, **more)
        path = f"/npm/{name}/-/{name.split('/')[-1]}-{version}.tgz"
        self.blobs[path] = data
        integrity = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
        dist = {"tarball": self.base + path, "integrity": integrity}
        entry = {
            "name": name,
            "version": version,
            "dependencies": dict(deps or {}),
            "dist": dist,
            **more,
        }
        self.packuments.setdefault(name, {})[version] = {**entry, "bin": dict(bin_ or {})}

    def wheel(self, name: str, version: str, requires: list[str] | None = None) -> None:
        self.add_wheel(f"{name}-{version}-py3-none-any.whl", wheel(name, version, requires or []))

    def add_wheel(self, filename: str, data: bytes) -> None:
        self.blobs[f"/files/{filename}"] = data
        self.wheels.setdefault(filename.split("-")[0].lower().replace("_", "-"), []).append(
            filename
        )

    def answer(self, path: str) -> tuple[int, bytes, str]:
        if path in self.blobs:
            return 200, self.blobs[path], "application/octet-stream"
        if path.startswith("/npm/") and path[5:] in self.packuments:
            versions = self.packuments[path[5:]]
            doc = {"name": path[5:], "dist-tags": {"latest": max(versions)}, "versions": versions}
            return 200, json.dumps(doc).encode(), "application/json"
        if path.startswith("/simple/"):
            name = path[len("/simple/") :].strip("/").lower().replace("_", "-")
            if name in self.wheels:
                digests = {
                    f: hashlib.sha256(self.blobs[f"/files/{f}"]).hexdigest()
                    for f in self.wheels[name]
                }
                links = "".join(
                    f'<a href="/files/{f}#sha256={sha}">{f}</a>\n' for f, sha in digests.items()
                )
                return 200, f"<html><body>{links}</body></html>".encode(), "text/html"
        return 404, b"{}", "application/json"

    def __enter__(self) -> PackageRegistry:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
