"""Run by benchmarks/egress.py inside a computer's namespace: HTTPS to one host through the
proxy's TLS port (SNI and Host name the host): request latency on a new connection each (two
handshakes when intercepted), on one kept-alive connection, and three 64 MiB downloads. Prints JSON.
Usage: _tls_client.py PROXY_IP PORT NAME CAFILE N"""

from __future__ import annotations

import http.client
import json
import ssl
import sys
import time

host, port, name, cafile, n = (
    sys.argv[1],
    int(sys.argv[2]),
    sys.argv[3],
    sys.argv[4],
    int(sys.argv[5]),
)
ctx = ssl.create_default_context(cafile=cafile)


def fetch(conn: http.client.HTTPSConnection, path: str) -> int:
    conn.request("GET", path, headers={"Host": name})
    response = conn.getresponse()
    size = 0
    while chunk := response.read(1 << 20):
        size += len(chunk)
    assert response.status == 200, response.status
    return size


class Named(http.client.HTTPSConnection):
    """Dials the proxy's address, asks for `name` in the SNI."""

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = ctx.wrap_socket(self.sock, server_hostname=name)


fresh = []
for _ in range(n):
    t0 = time.perf_counter()
    c = Named(host, port, timeout=30)
    fetch(c, "/")
    c.close()
    fresh.append(time.perf_counter() - t0)
kept = []
c = Named(host, port, timeout=30)
for _ in range(n):
    t0 = time.perf_counter()
    fetch(c, "/")
    kept.append(time.perf_counter() - t0)
c.close()
throughput = []  # MiB/s, several downloads: one alone varies by a third on a busy host
for _ in range(3):
    t0 = time.perf_counter()
    c = Named(host, port, timeout=60)
    got = fetch(c, "/big")
    c.close()
    throughput.append(got / (1 << 20) / (time.perf_counter() - t0))
print(json.dumps({"fresh": fresh, "kept": kept, "throughput": throughput}))
