"""``outbound`` really reaches the internet (while the host's loopback and private ranges stay shut,
test_escapes.py): a stand-in public host at 203.0.113.2 (TEST-NET-3) lives in a network namespace
of the test's own, behind a veth pair, and a sandboxed rental fetches a page from it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import LiveServer, wait_for
from tests.sandbox.conftest import attack

PAGE = "hello from the internet " + os.urandom(4).hex()


@pytest.fixture
def public_host() -> Iterator[str]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("the outbound test needs root and iproute2 (make test installs it)")
        pytest.skip("the outbound test needs root and iproute2")
    tag = os.urandom(3).hex()
    ns, host_if, peer_if = f"dlnet{tag}", f"dlh{tag}", f"dlp{tag}"
    # A /30 of TEST-NET-3 per test worker: two of these hosts at once (the SQLite and PostgreSQL
    # variants in two pytest-xdist workers) must not share an address, or one reaches the other.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    base = 4 * (int(worker[2:]) % 63 if worker[2:].isdigit() else 0)
    host_ip, peer_ip = f"203.0.113.{base + 1}", f"203.0.113.{base + 2}"
    sh = lambda *a: subprocess.run(a, check=True, capture_output=True, timeout=20)  # noqa: E731
    sh("ip", "netns", "add", ns)
    server = None
    try:
        sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", peer_if)
        sh("ip", "link", "set", peer_if, "netns", ns)
        sh("ip", "addr", "add", f"{host_ip}/30", "dev", host_if)
        sh("ip", "link", "set", host_if, "up")
        sh("ip", "-n", ns, "addr", "add", f"{peer_ip}/30", "dev", peer_if)
        sh("ip", "-n", ns, "link", "set", peer_if, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        code = (
            "import http.server as h\n"
            "class H(h.BaseHTTPRequestHandler):\n"
            f"    def do_GET(s): s.send_response(200); s.end_headers(); s.wfile.write({PAGE!r}.encode())\n"
            f"h.HTTPServer(({peer_ip!r}, 8080), H).serve_forever()\n"
        )
        # Started by pid (nsenter), not by the name: a name under /run/netns may be unmounted by
        # a sandbox's slirp4netns on hosts where /run is a shared mount.
        server = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", code])
        wait_for(lambda: _reachable(peer_ip, 8080), timeout=20)
        yield f"{peer_ip}:8080"
    finally:
        if server is not None:
            server.kill()
            server.wait(timeout=10)
        subprocess.run(["ip", "link", "delete", host_if], capture_output=True, timeout=20)
        subprocess.run(["ip", "netns", "delete", ns], capture_output=True, timeout=20)


def _reachable(host: str, port: int) -> bool:
    try:
        return httpx.get(f"http://{host}:{port}/", timeout=1).status_code == 200
    except httpx.HTTPError:
        time.sleep(0.1)
        return False


def test_outbound_reaches_a_public_host(sbx: LiveServer, public_host: str) -> None:
    if not sbx.platform.sandbox.outbound_ok:
        pytest.fail("outbound should be available on a root server with slirp4netns and nftables")
    with sbx.new_user("olga") as c:
        fetch = f"import urllib.request as u; print(u.urlopen('http://{public_host}/', timeout=10).read().decode())"
        view, out = attack(c, 'python3 -c "$F"', env={"F": fetch})
        assert view["sandbox"]["network"] == "outbound"
        assert PAGE in out, out
        with sbx.admin() as a:
            host = a.get("/admin/hosts").json()[0]["name"]
            assert a.put(f"/admin/hosts/{host}", json={"network_policy": "none"}).status_code == 200
        view, out = attack(c, 'python3 -c "$F" 2>&1 | tail -1', env={"F": fetch})
        assert PAGE not in out and view["sandbox"]["network"] == "none"
