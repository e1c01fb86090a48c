"""Run by benchmarks/egress.py, inside a computer's namespace or on the host: HTTP request
latency (keep-alive off: one connection a request, as through the proxy), 64 MiB downloads, and
DNS query latency against one resolver. Prints JSON."""

from __future__ import annotations

import json
import socket
import sys
import time

DOWNLOADS = 5
host, port, name, dns, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
request = f"GET / HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n".encode()
latency = []
for _ in range(n):
    t0 = time.perf_counter()
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(request)
        while s.recv(65536):
            pass
    latency.append(time.perf_counter() - t0)
throughput = []  # MiB/s, several downloads: one alone varies by a third on a busy host
for _ in range(DOWNLOADS):
    t0 = time.perf_counter()
    got = 0
    with socket.create_connection((host, port), timeout=30) as s:
        s.sendall(f"GET /big HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n".encode())
        while chunk := s.recv(1 << 20):
            got += len(chunk)
    throughput.append(got / (1 << 20) / (time.perf_counter() - t0))
query = bytes.fromhex("abcd01000001000000000000") + b"\x07allowed\x04test\x00\x00\x01\x00\x01"
dns_latency = []
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
    u.settimeout(5)
    for _ in range(n):
        t0 = time.perf_counter()
        u.sendto(query, (dns, 53))
        u.recv(512)
        dns_latency.append(time.perf_counter() - t0)
print(json.dumps({"latency": latency, "throughput": throughput, "dns": dns_latency}))
