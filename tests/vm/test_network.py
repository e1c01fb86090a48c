"""Each computer isolated, outbound denied by default, a hostname allowlist that holds: real
guests through the real server, against a test internet built in namespaces of its own."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest

from sanbox import Sanbox
from sanbox.sdk import Computer

from ..internet import ALLOWED, BLOCKED, DNS, Internet

pytestmark = pytest.mark.vm

DNS_PROBE = """
import socket, sys
sys.path.insert(0, "/opt/sanbox")
q = bytes.fromhex("abcd01000001000000000000") + b"\\x07allowed\\x04test\\x00\\x00\\x01\\x00\\x01"
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)
s.sendto(q, (sys.argv[1], 53))
try:
    s.recv(512); print("answered")
except OSError as e:
    print("no answer:", e)
"""


@pytest.fixture(scope="module")
def guest(client: Sanbox, internet: Internet) -> Iterator[Computer]:
    c = client.computers.create(name="netguest", allow=[], idle_timeout=0)
    c.files.write("/root/ca.pem", internet.ca.read_bytes())
    c.files.write("/root/dnsprobe.py", DNS_PROBE.encode())
    yield c
    c.delete()


def sh(c: Computer, cmd: str) -> tuple[int, str]:
    r = c.exec(["sh", "-c", cmd])
    return r.exit_code, r.stdout + r.stderr


def curl(c: Computer, *args: str) -> tuple[int, str]:
    return sh(c, "curl -sS --max-time 4 --cacert /root/ca.pem " + " ".join(args))


def test_with_an_empty_list_nothing_goes_out(guest: Computer) -> None:
    guest.set_allowlist([])
    assert curl(guest, "http://allowed.test/")[0] != 0  # the name does not even resolve
    assert curl(guest, f"https://{ALLOWED}/")[0] != 0
    code, out = curl(guest, f"http://{ALLOWED}/")
    assert "hello" not in out
    assert "answered" not in sh(guest, f"python3 /root/dnsprobe.py {DNS}")[1]  # another resolver
    assert curl(guest, f"telnet://{ALLOWED}:7777")[0] != 0  # raw TCP to an IP
    probe = f"python3 -c \"import socket; s=socket.socket(2,2); s.sendto(b'x',('{ALLOWED}',5005))\""
    sh(guest, probe)  # raw UDP: no route, no reply (and nothing listens that could answer)
    events = [e for e in guest.events() if e.type == "network.denied"]
    assert any(e.data["name"] == "allowed.test" for e in events)  # recorded without payload


def test_the_allowlist_holds_against_tricks(guest: Computer) -> None:
    guest.set_allowlist(["allowed.test"])
    assert curl(guest, "https://allowed.test/") == (0, "hello from allowed.test\n")
    assert curl(guest, "http://allowed.test/") == (0, "hello from allowed.test\n")
    assert curl(guest, "https://blocked.test/")[0] != 0
    # the guest picks the blocked server's address: the proxy dials the name, not that address
    code, out = curl(guest, f"--resolve allowed.test:443:{BLOCKED}", "https://allowed.test/")
    assert "blocked" not in out and (code, out) == (0, "hello from allowed.test\n")
    sh(guest, f"echo '{BLOCKED} allowed.test' >> /etc/hosts")
    try:
        assert curl(guest, "https://allowed.test/") == (0, "hello from allowed.test\n")
    finally:
        sh(guest, "sed -i '/allowed.test/d' /etc/hosts")
    code, out = curl(guest, "-H 'Host: blocked.test'", f"http://{ALLOWED}/")
    assert "blocked.test is blocked (not in the allowlist)" in out and "hello" not in out


def test_names_resolving_to_private_or_metadata_addresses_are_refused(guest: Computer) -> None:
    guest.set_allowlist(["allowed.test", "private.test", "metadata.test"])
    code, out = curl(guest, "http://private.test/")
    assert "resolves to a private or reserved address" in out
    code, out = curl(guest, "http://metadata.test/")
    assert "metadata" in out and "hello" not in out


def test_the_guest_reaches_no_host_server_metadata_or_other_computer(
    guest: Computer, client: Sanbox
) -> None:
    guest.set_allowlist(["allowed.test"])
    for target in (
        "http://10.0.0.1:7070/",
        "http://10.0.0.1:22/",
        "http://198.51.100.1:7070/",
        "http://169.254.169.254/latest/meta-data/",
    ):
        code, out = curl(guest, target)
        assert code != 0 or "Sanbox egress" in out, (target, out)
    other = client.computers.create(name="netother", allow=[], idle_timeout=0)
    try:
        other.exec("cd /tmp && nohup python3 -m http.server 8000 >/dev/null 2>&1 &")
        assert curl(guest, "http://10.0.0.2:8000/")[0] != 0  # its own address, not the other's
    finally:
        other.delete()


def test_ipv6_goes_nowhere(guest: Computer) -> None:
    assert sh(guest, "test -e /proc/net/if_inet6")[0] != 0  # off in the guest
    assert curl(guest, "-6", "http://[2001:db8::10]/")[0] != 0


def test_a_live_removal_cuts_an_open_connection(guest: Computer) -> None:
    guest.set_allowlist(["allowed.test"])
    sh(guest, "nohup curl -sN --max-time 120 http://allowed.test/slow > /tmp/slow.out 2>&1 &")
    deadline = time.monotonic() + 30
    while int(sh(guest, "wc -l < /tmp/slow.out")[1].strip() or 0) < 2:
        assert time.monotonic() < deadline, sh(guest, "cat /tmp/slow.out")
        time.sleep(0.3)
    assert guest.set_allowlist([]) >= 1  # closed at once
    deadline = time.monotonic() + 15
    while sh(guest, "pgrep -x curl")[0] == 0:  # the download ends (curl sees the close)
        assert time.monotonic() < deadline, "curl still running after the flow was cut"
        time.sleep(0.3)
    lines = int(sh(guest, "wc -l < /tmp/slow.out")[1])
    time.sleep(1.5)
    assert int(sh(guest, "wc -l < /tmp/slow.out")[1]) == lines
    assert any(e.type == "network.flows_closed" for e in guest.events())


def test_the_server_rejects_bad_rules(guest: Computer) -> None:
    from sanbox.sdk.errors import SanboxError

    with pytest.raises(SanboxError) as info:
        guest.set_allowlist(["http://nope"])
    assert info.value.code == "invalid_rule"
    assert guest.allowlist() == []


def test_namespaces_go_with_their_computers(client: Sanbox) -> None:
    c = client.computers.create(name="netgone", idle_timeout=0)
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert c.id in names
    c.delete()
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert c.id not in names


def test_a_lost_namespace_is_restored_at_the_next_start(client: Sanbox, internet: Internet) -> None:
    """As after a host reboot: the namespace is gone; starting the computer makes it again."""
    c = client.computers.create(name="netreboot", allow=["allowed.test"], idle_timeout=0)
    try:
        c.stop()
        netns = next(
            n
            for n in subprocess.run(
                ["ip", "netns", "list"], capture_output=True, text=True
            ).stdout.split()
            if n.endswith(c.id)
        )
        subprocess.run(["ip", "netns", "del", netns], check=True)
        c.start()
        assert curl(c, "http://allowed.test/") == (0, "hello from allowed.test\n")
    finally:
        c.delete()
