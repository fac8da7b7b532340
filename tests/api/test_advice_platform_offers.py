"""The advisor sees this platform's offers through the real adapter (issue 27): the operator's
interruptible price reaches ``/advice`` as the platform's interruptible option. Until issue 27 the
adapter in ``api/app.py`` dropped that price, so advice never suggested it; the advisor's own tests
built their offers by hand and could not see it."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from danlu.billing import service as billing
from danlu.core.clock import SystemClock
from danlu.server.app import create_app
from tests.conftest import make_platform


def test_the_operators_interruptible_price_reaches_advice(db_url: str, tmp_path: Path) -> None:
    p, token = make_platform(db_url, tmp_path / "data", SystemClock(), spec="T4:2")
    try:
        billing.set_price(p, "T4", "36.00", interruptible="12.00")
        with TestClient(create_app(p), headers={"Authorization": f"Bearer {token}"}) as c:
            r = c.post(
                "/api/v1/advice",
                json={"params": 1e8, "task": "inference", "tokens": 1e6, "gpu": "T4", "include_public": False},
            )
            assert r.status_code == 200, r.text
            ours = {(o["provider"], o["plan"]): o for o in r.json()["options"]}
            assert ("this platform", "on-demand") in ours, sorted(ours)
            assert ("this platform", "interruptible") in ours, sorted(ours)
            spot, full = ours["this platform", "interruptible"], ours["this platform", "on-demand"]
            assert (spot["gpu_count"], spot["currency"]) == (full["gpu_count"], full["currency"])
    finally:
        p.db.engine.dispose()
