"""``/readyz`` (issue 28): ready only while the database, the backend, the control loop's lease
and the sandbox all answer; ``/healthz`` stays the liveness check. A Slurm controller that stops
answering is tested on the real cluster in tests/slurm (test_an_unreachable_controller_…)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from danlu.backend import SandboxStatus
from danlu.context import Platform
from danlu.core.clock import FakeClock
from danlu.server.app import create_app
from danlu.server.loop import ControlLoop


def _ready(client: TestClient) -> tuple[int, dict[str, bool]]:
    r = client.get("/readyz")
    body = r.json()
    assert body["status"] == ("ready" if r.status_code == 200 else "not_ready"), body
    return r.status_code, {name: check["ok"] for name, check in body["checks"].items()}


def test_ready_only_while_some_server_holds_the_control_loop_lease(platform: Platform, fake_clock: FakeClock) -> None:
    with TestClient(create_app(platform)) as client:
        status, ok = _ready(client)
        assert status == 503 and ok == {"database": True, "backend": True, "control_loop": False, "sandbox": True}
        assert client.get("/healthz").status_code == 200  # alive, not ready: nothing meters yet
        loop = ControlLoop(platform)
        loop.run_once()  # takes the lease
        assert _ready(client) == (200, dict.fromkeys(ok, True))
        fake_clock.advance(seconds=60)  # its holder stopped renewing: the lease lapses (5 ticks, at least 10 s)
        status, ok = _ready(client)
        assert status == 503 and not ok["control_loop"]
        loop.run_once()
        assert _ready(client)[0] == 200


def test_not_ready_while_the_backend_or_the_sandbox_cannot_take_a_rental(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    ControlLoop(platform).run_once()
    with TestClient(create_app(platform)) as client:
        monkeypatch.setattr(platform.backend, "unavailable", lambda: "Slurmctld(primary) at ctl-7.internal is DOWN")
        r = client.get("/readyz")
        assert r.status_code == 503 and not r.json()["checks"]["backend"]["ok"]
        assert "ctl-7" not in r.text  # anyone may ask: the reason stays in the operator's tools
        monkeypatch.undo()
        assert _ready(client)[0] == 200
    broken = replace(platform, sandbox=SandboxStatus("unavailable", "bubblewrap cannot create a user namespace"))
    with TestClient(create_app(broken)) as client:
        status, ok = _ready(client)
        assert status == 503 and not ok["sandbox"] and ok["backend"]
