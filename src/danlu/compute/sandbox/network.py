"""A sandbox's network, by the operator's policy for its host.

* ``none``: a network namespace of its own with only a loopback device. Nothing outside.
* ``outbound``: the internet, through **slirp4netns** (Debian ``slirp4netns``): a user-mode TCP/IP
  stack that turns the sandbox's packets into ordinary sockets of the host. The platform makes the
  run's network namespace itself (owned by the host's user namespace, so the sandbox has no
  capability over it) and sets it up completely before the run starts. slirp4netns is started with
  ``--disable-host-loopback`` (the gateway 10.0.2.2 is not the host's 127.0.0.1), ``--enable-sandbox``
  and ``--enable-seccomp``. On top, an nftables table inside the sandbox's own namespace (set by the
  platform; the renter has no capability to change it) rejects the host's loopback, every private,
  link-local, shared and multicast range (the cloud metadata address included) and this host's own
  addresses, so neither the control plane's port nor the database is reachable whatever it listens
  on. DNS goes to slirp's resolver (10.0.2.3) only. Why slirp4netns and not pasta: it attaches to an
  existing namespace by path, and its "no host loopback" switch is one flag; pasta's equivalent
  needs a set of port-mapping flags to close every door.
* ``host``: the host's own network (trusted deployments only: the control plane is reachable).

``auto`` resolves to ``outbound`` where slirp4netns, nft and /dev/net/tun are usable (a root
server), else to ``none``.
"""

from __future__ import annotations

import ipaddress
import os
import select
import subprocess
from collections.abc import Iterable
from pathlib import Path

import psutil

from danlu.compute.sandbox.helpers import SAFE_PATH, helper

POLICIES = ("none", "outbound", "host")

# Never reachable from an ``outbound`` sandbox (RFC 1918, 6598, 3927, 5735 and friends).
BLOCKED_V4 = (
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "224.0.0.0/4",
    "240.0.0.0/4",
)
BLOCKED_V6 = ("::1/128", "fc00::/7", "fe80::/10", "ff00::/8", "::ffff:0:0/96")
SLIRP_DNS = "10.0.2.3"


class NetworkError(OSError):
    pass


def outbound_available() -> tuple[bool, str]:
    """Whether ``outbound`` can be provided here, and if not, why."""
    if os.geteuid() != 0:
        return False, "needs a root server (slirp4netns must join each sandbox's namespace)"
    for tool in ("slirp4netns", "nft", "nsenter", "unshare", "ip"):
        if helper(tool) is None:
            return False, f"{tool} is not installed (Debian packages slirp4netns, nftables, iproute2, util-linux)"
    if not Path("/dev/net/tun").exists():
        return False, "/dev/net/tun is missing"
    return True, "slirp4netns with an nftables filter"


def resolve_policy(policy: str) -> tuple[str, str]:
    """(effective policy, note) for a configured one; ``auto`` → outbound where it works."""
    if policy not in (*POLICIES, "auto"):
        raise ValueError(f"network policy is one of auto, {', '.join(POLICIES)}")
    if policy in ("auto", "outbound"):
        ok, why = outbound_available()
        if ok:
            return "outbound", why
        if policy == "outbound":
            raise NetworkError(f"network policy outbound is not available on this host: {why}")
        return "none", f"outbound unavailable ({why})"
    return policy, ""


def host_addresses() -> list[str]:
    """This host's own addresses (so an outbound sandbox cannot reach the host by a public IP)."""
    out = []
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family.name in ("AF_INET", "AF_INET6"):
                out.append(a.address.split("%")[0])
    return sorted(set(out))


def nft_rules(own_addresses: Iterable[str] = ()) -> str:
    """The nftables ruleset loaded into an ``outbound`` sandbox's namespace. Pure."""
    v4, v6 = list(BLOCKED_V4), list(BLOCKED_V6)
    for text in own_addresses:
        addr = ipaddress.ip_address(text)
        (v4 if addr.version == 4 else v6).append(f"{addr}/{addr.max_prefixlen}")
    return (
        "table inet danlu_sandbox {\n"
        "  chain out {\n"
        "    type filter hook output priority 0; policy accept;\n"
        '    oifname "lo" accept\n'
        f"    ip daddr {SLIRP_DNS} udp dport 53 accept\n"
        f"    ip daddr {SLIRP_DNS} tcp dport 53 accept\n"
        f"    ip daddr {{ {', '.join(v4)} }} reject with icmp type admin-prohibited\n"
        f"    ip6 daddr {{ {', '.join(v6)} }} reject with icmpv6 type admin-prohibited\n"
        "  }\n"
        "}\n"
    )


_ENV = {"PATH": SAFE_PATH}


def _run(args: list[str], timeout_s: float, stdin: bytes | None = None) -> None:
    r = subprocess.run(args, input=stdin, capture_output=True, timeout=timeout_s, env=_ENV)
    if r.returncode != 0:
        raise NetworkError(f"{' '.join(args[:3])} failed: {r.stderr.decode(errors='replace').strip()}")


class OutboundNetwork:
    """A network namespace of the platform's (owned by the host's user namespace, so nothing in a
    sandbox can change it), fully set up before any of the run's code exists: loopback, the
    slirp4netns link and the nftables filter. A holder process keeps it alive until the run has
    joined it (``path``); then :meth:`release_holder`. No named namespace under /run/netns is used:
    slirp4netns's own sandbox would unmount such names on hosts where /run is a shared mount."""

    def __init__(self, exit_fd: int, rules: str, log_path: Path, timeout_s: float = 10.0) -> None:
        self._holder = subprocess.Popen(
            ["unshare", "--net", "--", "sh", "-c", "echo ready; exec sleep 3600"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env=_ENV,
        )
        try:
            assert self._holder.stdout is not None
            if not select.select([self._holder.stdout], [], [], timeout_s)[0] or not self._holder.stdout.readline():
                raise NetworkError("could not create the sandbox's network namespace")
            self.path = f"/proc/{self._holder.pid}/ns/net"
            _run(["nsenter", f"--net={self.path}", "ip", "link", "set", "lo", "up"], timeout_s)
            self.slirp_pid = _start_slirp(self.path, exit_fd, log_path, timeout_s)
            _run(["nsenter", f"--net={self.path}", "nft", "-f", "-"], timeout_s, stdin=rules.encode())
        except BaseException:
            self.release_holder()
            raise

    def release_holder(self) -> None:
        if self._holder.poll() is None:
            self._holder.kill()
        self._holder.wait(timeout=10)
        if self._holder.stdout is not None:
            self._holder.stdout.close()


def _start_slirp(path: str, exit_fd: int, log_path: Path, timeout_s: float) -> int:
    ready_r, ready_w = os.pipe()
    log = open(log_path, "ab")  # noqa: SIM115 (handed to the child, closed below)
    try:
        slirp = subprocess.Popen(
            [
                "slirp4netns",
                "--configure",
                "--mtu=65520",
                "--disable-host-loopback",
                "--enable-sandbox",
                "--enable-seccomp",
                f"--ready-fd={ready_w}",
                f"--exit-fd={exit_fd}",
                "--netns-type=path",  # as root, straight into the namespace (no user namespace to join)
                path,
                "tap0",
            ],
            pass_fds=(ready_w, exit_fd),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            env=_ENV,
        )
        os.close(ready_w)
        ready_w = -1
        readable, _, _ = select.select([ready_r], [], [], timeout_s)
        if not readable or os.read(ready_r, 1) != b"1":
            slirp.kill()
            slirp.wait(timeout=5)
            err = log_path.read_text(errors="replace").strip().splitlines()[-1:] or ["timed out"]
            raise NetworkError(f"slirp4netns did not come up: {err[0]}")
    finally:
        log.close()
        os.close(ready_r)
        if ready_w != -1:
            os.close(ready_w)
    return slirp.pid
