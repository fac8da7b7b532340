"""What sandboxing this host gives (found by danlu.compute.sandbox.probe at start-up)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SandboxStatus:
    mode: str  # bubblewrap | off | unavailable
    detail: str  # one line a person reads
    limits: str = "none"  # cgroup-v2 | cgroup-v1 | rlimits | none
    network: str = "host"  # the effective default network policy of this host
    identity: str = "platform user"  # per-renter uid | platform user
    outbound_ok: bool = False  # whether the ``outbound`` policy can be chosen for this host

    @property
    def sandboxed(self) -> bool:
        return self.mode == "bubblewrap"

    def banner(self) -> str:
        if self.mode == "bubblewrap":
            what = f"{self.identity}; limits by {self.limits}; network {self.network}"
            return f"sandbox: bubblewrap ({what}) — {self.detail}"
        if self.mode == "off":
            return f"sandbox: OFF (--no-sandbox) — {self.detail}"
        return f"sandbox: UNAVAILABLE — {self.detail}"
