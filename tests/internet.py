"""A test internet in network namespaces of its own: a namespace with a veth to this host
(198.51.100.1/24 on the host side), holding a DNS server (198.51.100.53) for the test zone and
HTTP/HTTPS servers for allowed.test (198.51.100.10) and blocked.test (198.51.100.20) with
certificates from a test CA, plus private.test resolving to a private address. echo.test
(198.51.100.30) is an HTTPS echo: it writes each request it gets, headers and all, to its log on
this host (`echoed()`), and answers with the header names and a digest of each value, never the
values (`/redirect?to=URL` answers 302 to URL); untrusted.test (198.51.100.40) shows a
certificate no trust store accepts. model.test (198.51.100.50) is an OpenAI-compatible stub
over HTTPS (`POST /v1/chat/completions` answers `MODEL_REPLY`, streamed as SSE when asked;
`GET /v1/models`; 404 to anything else) that logs each request it gets, Authorization header and
all, on this host (`model_requests()`). Nothing leaves the
machine: only these addresses, on this host, are ever dialled."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent
HOST_SIDE = "198.51.100.1"
ALLOWED, BLOCKED, DNS = "198.51.100.10", "198.51.100.20", "198.51.100.53"
ECHO, UNTRUSTED = "198.51.100.30", "198.51.100.40"
MODEL = "198.51.100.50"
MODEL_REPLY = "Hello from the model.test stub."  # what its chat completions say
ZONE = {
    "allowed.test": ALLOWED,
    "blocked.test": BLOCKED,
    "private.test": "10.9.9.9",
    "metadata.test": "169.254.169.254",
    "echo.test": ECHO,
    "untrusted.test": UNTRUSTED,
    "model.test": MODEL,
}


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


def make_ca(folder: Path) -> tuple[Path, Path, Path]:
    """A test CA and a certificate for allowed.test and blocked.test signed by it."""
    ca_key, ca, key, csr, cert = (
        folder / n for n in ("ca.key", "ca.pem", "srv.key", "srv.csr", "srv.pem")
    )
    sh(
        "openssl",
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(ca_key),
        "-out",
        str(ca),
        "-days",
        "2",
        "-subj",
        "/CN=Sanbox test CA",
    )
    sh(
        "openssl",
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(key),
        "-out",
        str(csr),
        "-subj",
        "/CN=allowed.test",
    )
    ext = folder / "san.ext"
    ext.write_text(
        "subjectAltName=DNS:allowed.test,DNS:blocked.test,DNS:echo.test,DNS:model.test\n"
    )
    sh(
        "openssl",
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca),
        "-CAkey",
        str(ca_key),
        "-CAcreateserial",
        "-out",
        str(cert),
        "-days",
        "2",
        "-extfile",
        str(ext),
    )
    return ca, cert, key


def make_untrusted(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for untrusted.test: no CA anyone trusts signed it."""
    cert, key = folder / "untrusted.pem", folder / "untrusted.key"
    sh(
        "openssl",
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(key),
        "-out",
        str(cert),
        "-days",
        "2",
        "-subj",
        "/CN=untrusted.test",
        "-addext",
        "subjectAltName=DNS:untrusted.test",
    )
    return cert, key


@dataclass
class Internet:
    netns: str
    veth: str
    folder: Path
    ca: Path
    proc: subprocess.Popen[bytes]

    upstream_dns = f"{DNS}:53"

    @classmethod
    def start(cls) -> Internet:
        tag = secrets.token_hex(2)
        netns, veth = f"sbtest-net-{tag}", f"sbtn{tag}"
        folder = Path(tempfile.mkdtemp(prefix="sbnet"))
        ca, cert, key = make_ca(folder)
        sh("ip", "netns", "add", netns)
        try:
            sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
            sh("ip", "addr", "add", f"{HOST_SIDE}/24", "dev", veth)
            sh("ip", "link", "set", veth, "up")
            for cmd in (["link", "set", "lo", "up"], ["link", "set", "eth0", "up"]):
                sh("ip", "-n", netns, *cmd)
            for ip in ("198.51.100.2", ALLOWED, BLOCKED, DNS, ECHO, UNTRUSTED, MODEL):
                sh("ip", "-n", netns, "addr", "add", f"{ip}/24", "dev", "eth0")
            bad_cert, bad_key = make_untrusted(folder)
            config = folder / "config.json"
            config.write_text(
                json.dumps(
                    {
                        "zone": ZONE,
                        "dns": DNS,
                        "cert": str(cert),
                        "key": str(key),
                        "hosts": {"allowed.test": ALLOWED, "blocked.test": BLOCKED},
                        "requests_log": str(folder / "requests.log"),
                        "echo": {"ip": ECHO, "log": str(folder / "echo.log")},
                        "untrusted": {"ip": UNTRUSTED, "cert": str(bad_cert), "key": str(bad_key)},
                        "model": {
                            "ip": MODEL,
                            "log": str(folder / "model.log"),
                            "reply": MODEL_REPLY,
                        },
                    }
                )
            )
            proc = subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    netns,
                    sys.executable,
                    str(HERE / "internet_server.py"),
                    str(config),
                ],
                stdout=subprocess.PIPE,
            )
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.strip() == b"ready", "the test internet did not start"
        except BaseException:
            subprocess.run(["ip", "netns", "del", netns], capture_output=True)
            subprocess.run(["ip", "link", "del", veth], capture_output=True)
            raise
        return cls(netns, veth, folder, ca, proc)

    def requests(self) -> list[str]:
        """Every request head the test hosts read so far: `SERVER HOST METHOD PATH` lines."""
        log = self.folder / "requests.log"
        return log.read_text().splitlines() if log.exists() else []

    def heads(self, server: str) -> list[dict[str, str]]:
        """The request heads allowed.test or blocked.test read: `{"server", "path", "head"}`."""
        log = self.folder / "heads.log"
        lines = log.read_text().splitlines() if log.exists() else []
        return [h for h in map(json.loads, lines) if h["server"] == server]

    def echoed(self) -> list[dict[str, object]]:
        """Every request echo.test read so far: `{"method", "path", "headers": [[name, value]]}`
        (values as received: this log is on the host, never seen by a guest)."""
        log = self.folder / "echo.log"
        lines = log.read_text().splitlines() if log.exists() else []
        return [json.loads(line) for line in lines]

    def model_requests(self) -> list[dict[str, object]]:
        """Every request model.test read so far: `{"method", "path", "headers": [[name, value]],
        "body_bytes"}` (values as received, the Authorization header's too: a host-side log)."""
        log = self.folder / "model.log"
        lines = log.read_text().splitlines() if log.exists() else []
        return [json.loads(line) for line in lines]

    def stop(self) -> None:
        self.proc.kill()
        self.proc.communicate()
        subprocess.run(["ip", "link", "del", self.veth], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True)
        for f in self.folder.iterdir():
            f.unlink()
        self.folder.rmdir()
