"""A live server whose rentals run in the real sandbox (bubblewrap, the renter's own uid, cgroups
where the host has them, the outbound network policy where it works), with small limits so the
hog tests end quickly, and a canary secret in the server's environment."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from danlu.core.clock import SystemClock
from tests.conftest import LiveServer, make_platform, require_sandbox, wait_for

CANARY = "DANLU_TEST_CANARY_" + secrets.token_hex(8)
LIMITS = {"pids_per_gpu": 64, "mem_per_gpu_mb": 256, "disk_per_gpu_mb": 64, "cpus_per_gpu_milli": 1000}


def sandboxed_server(db_url: str, data_dir: Path, **kw: Any) -> LiveServer:
    require_sandbox()
    p, token = make_platform(
        db_url,
        data_dir,
        SystemClock(),
        spec="A100-80GB:2,T4:2",
        host_settings=LIMITS,
        stop_grace_s=2,
        tick_interval_s=0.2,
        meter_interval_s=1.0,
        **kw,
    )
    assert p.sandbox.sandboxed, p.sandbox
    if p.backend.sandbox is not None:  # a fork bomb / full disk is ended within seconds here
        p.backend.sandbox.fork_bomb_s = 2.0
        p.backend.sandbox.disk_check_s = 0.5
    return LiveServer(p, token)


@pytest.fixture
def sbx(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveServer]:
    monkeypatch.setenv("DANLU_CANARY_SECRET", CANARY)  # the server's own environment
    with sandboxed_server(db_url, tmp_path / "data") as srv:
        with srv.admin() as a:
            assert a.put("/admin/prices/A100-80GB", json={"price_per_hour": "36.00"}).status_code == 200
            assert a.put("/admin/prices/T4", json={"price_per_hour": "3.60"}).status_code == 200
        yield srv
    srv.platform.db.engine.dispose()


def rent(c: httpx.Client, command: list[str], gpu: str = "T4", **extra: Any) -> str:
    r = c.post("/instances", json={"gpu_model": gpu, "command": command, **extra})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["status"] == "running", body
    return str(body["id"])


def finished(c: httpx.Client, iid: str, timeout: float = 60) -> dict[str, Any]:
    done = wait_for(
        lambda: (v := c.get(f"/instances/{iid}").json())["status"] in ("exited", "lost", "stopped") and v,
        timeout=timeout,
    )
    assert isinstance(done, dict)
    return done


def log_of(c: httpx.Client, iid: str) -> str:
    return str(c.get(f"/instances/{iid}/logs").json()["text"])


def attack(c: httpx.Client, script: str, **extra: Any) -> tuple[dict[str, Any], str]:
    """Run ``script`` (sh) as a rental to its end; returns the final view and its output."""
    iid = rent(c, ["sh", "-c", script], **extra)
    view = finished(c, iid)
    time.sleep(0.1)
    return view, log_of(c, iid)


def tiny_rootfs(root: Path) -> Path:
    """A minimal image the test makes itself: busybox (Debian busybox-static) and its applets."""
    import shutil

    busybox = shutil.which("busybox")
    if busybox is None:
        pytest.fail("busybox is not installed (make test installs Debian's busybox-static)")
    (root / "bin").mkdir(parents=True)
    (root / "etc").mkdir()
    shutil.copy2(busybox, root / "bin" / "busybox")
    for applet in ("sh", "echo", "cat", "rm", "chmod", "id", "ls", "sleep"):
        (root / "bin" / applet).symlink_to("busybox")
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/:/bin/sh\n")
    return root
