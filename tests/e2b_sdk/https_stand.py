"""Run by test_https.py inside `unshare --net --mount` (a network and a mount namespace of the
test's own): loopback only, a DNS server on 127.0.0.1 answering `e2b.test` and `*.e2b.test`
with 127.0.0.1 (this namespace's /etc/resolv.conf points at it), the trust store replaced by
the system's plus the server's own CA (bind-mounted over /etc/ssl/certs/ca-certificates.crt),
and `sanbox server`'s app over HTTPS on 127.0.0.1:443 with `--tls-self-signed`'s certificate.
Then E2B's SDK, configured by E2B_DOMAIN and E2B_API_KEY only, and curl on a get_host() URL.
Prints "ok" when all of it worked."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).parents[2]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from sanbox.api import ServerSettings, create_app  # noqa: E402
from sanbox.api.tls import wildcard  # noqa: E402
from sanbox.host.data.layout import DataDir  # noqa: E402
from sanbox.host.drivers.local import LocalDriver  # noqa: E402
from sanbox.host.egress import dnsmsg  # noqa: E402
from sanbox.host.runtime import HostRuntime  # noqa: E402
from tests.component.conftest import fake_image  # noqa: E402
from tests.conftest import kill_agents  # noqa: E402

DOMAIN = "e2b.test"
BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def dns(sock: socket.socket) -> None:
    while True:
        data, peer = sock.recvfrom(4096)
        try:
            q = dnsmsg.parse_query(data)
        except dnsmsg.DnsFormatError:
            continue
        name = q.name.rstrip(".").lower()
        if name != DOMAIN and not name.endswith("." + DOMAIN):
            sock.sendto(dnsmsg.nxdomain(q), peer)
        elif q.qtype == dnsmsg.TYPE_A:
            sock.sendto(dnsmsg.answer_a(q, ["127.0.0.1"], 5), peer)
        else:
            sock.sendto(dnsmsg.empty(q), peer)


def bind(content: bytes, over: Path, folder: Path) -> None:
    source = folder / over.name
    source.write_bytes(content)
    subprocess.run(["mount", "--bind", str(source), str(over)], check=True)


def main() -> None:
    import uvicorn

    root = Path(tempfile.mkdtemp(prefix="sbh", dir="/tmp"))
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    dd = DataDir(root / "data")
    dd.ensure()
    fake_image(dd)
    ca, cert, key = wildcard(dd.root / "tls", DOMAIN)
    bind(b"nameserver 127.0.0.1\n", Path("/etc/resolv.conf"), root)
    bind(BUNDLE.read_bytes() + b"\n" + ca.read_bytes(), BUNDLE, root)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 53))
    threading.Thread(target=dns, args=(udp,), daemon=True).start()

    settings = ServerSettings(
        data_dir=dd.root,
        client_config=None,
        watch_interval=0.2,
        e2b_create_user=False,
        e2b_domain=DOMAIN,
        port_domain=DOMAIN,
    )
    app = create_app(settings, HostRuntime(dd, LocalDriver(), networking=False))
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=443,
            log_level="error",
            ssl_certfile=str(cert),
            ssl_keyfile=str(key),
            ws="websockets-sansio",
        )
    )
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        threading.Event().wait(0.01)
    try:
        os.environ.update(E2B_DOMAIN=DOMAIN, E2B_API_KEY=app.state.first_key)
        for name in ("E2B_API_URL", "E2B_SANDBOX_URL", "SSL_CERT_FILE"):
            os.environ.pop(name, None)
        check(root)
    finally:
        server.should_exit = True
        kill_agents(root)
        shutil.rmtree(root, ignore_errors=True)  # the test leaves the machine as it found it
    print("ok")


def check(root: Path) -> None:
    from e2b import Sandbox

    home = root / "home"
    home.mkdir()
    sbx = Sandbox.create("base", envs={"HOME": str(home)})
    assert sbx.commands.run("echo over https").stdout == "over https\n"
    www = root / "www"
    sbx.files.write(f"{www}/index.html", "https from the sandbox")
    served = sbx.commands.run(
        "exec python3 -m http.server 18124 --bind 127.0.0.1", background=True, cwd=str(www)
    )
    url = f"https://{sbx.get_host(18124)}/"
    assert url == f"https://18124-{sbx.sandbox_id}.{DOMAIN}/", url
    for _ in range(100):
        got = subprocess.run(["curl", "-sf", url], capture_output=True, text=True, check=False)
        if got.stdout == "https from the sandbox":
            break
        threading.Event().wait(0.05)
    else:
        raise AssertionError(f"curl {url}: {got.returncode} {got.stderr}")
    served.kill()
    signed = sbx.download_url(f"{www}/index.html", use_signature_expiration=60)
    got = subprocess.run(["curl", "-sf", signed], capture_output=True, text=True, check=False)
    assert got.stdout == "https from the sandbox", (signed, got.returncode, got.stderr)
    tampered = signed.replace("index.html", "other.html")
    got = subprocess.run(
        ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", tampered],
        capture_output=True,
        text=True,
        check=False,
    )
    assert got.stdout == "401", got.stdout
    sbx.kill()
    assert not sbx.is_running()


if __name__ == "__main__":
    main()
