"""The invoices and cost contract, end to end: `danlu server` as a real process, the CLI as real
processes, on SQLite and PostgreSQL."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import httpx

from tests.cli.test_contract import Cli, server  # noqa: F401 - the real-server fixture
from tests.conftest import wait_for


def test_cost_and_invoices_contract(server: tuple[str, Path], tmp_path: Path) -> None:  # noqa: F811
    url, data = server
    admin_token = (data / "admin-token").read_text().strip()
    cli = Cli(url, admin_token)
    alice = cli.json("admin", "user", "create", "alice")["token"]  # type: ignore[index]
    bob = cli.json("admin", "user", "create", "bob")["token"]  # type: ignore[index]
    cli("admin", "topup", "alice", "50.00")
    cli("admin", "price", "set", "A100-80GB", "36.00")  # 1 fen per GPU-second

    rented = json.loads(cli("rent", "--gpu", "A100-80GB", "--json", "--", "sleep", "60", token=alice).stdout)
    iid = rented["id"]

    def shown() -> dict[str, object]:
        return json.loads(cli("show", iid, "--json", token=alice).stdout)  # type: ignore[no-any-return]

    wait_for(lambda: int(shown()["billed_seconds"]) >= 3)  # type: ignore[call-overload]
    cli("stop", iid, token=alice)
    wait_for(lambda: shown()["status"] == "stopped")

    cost = cli.json("cost", iid, token=alice)
    assert isinstance(cost, dict) and cost["lines"]
    assert sum(Decimal(line["amount"]) for line in cost["lines"]) == Decimal(cost["cost"])
    assert cost["cost"] == shown()["cost"] and Decimal(cost["cost"]) >= Decimal("0.03")
    assert f"{iid}: {cost['cost']} CNY" in cli("cost", iid, token=alice).stdout  # the readable table
    denied = cli("cost", iid, "--json", ok=False, token=bob)
    assert denied.returncode != 0 and "instance_not_found" in denied.stderr

    period = datetime.now(UTC).strftime("%Y-%m")
    listed = cli.json("invoices", token=alice)
    assert isinstance(listed, list)
    [current] = [i for i in listed if i["period"] == period]
    assert current["status"] == "draft" and current["number"] is None
    assert current["total"] == cost["cost"] and current["lines"][0]["instance_id"] == iid

    page = tmp_path / "invoice.html"
    cli("invoice", "show", period, "--format", "html", "-o", str(page), token=alice)
    html = page.read_text()
    assert "DRAFT" in html and iid in html and "<script" not in html
    rows = list(csv.DictReader(io.StringIO(cli("invoice", "show", period, "--format", "csv", token=alice).stdout)))
    assert rows[-1]["description"] == "TOTAL" and rows[-1]["amount"] == cost["cost"]
    with httpx.Client(base_url=url + "/api/v1", headers={"Authorization": f"Bearer {alice}"}) as http:
        r = http.get(f"/invoices/{period}", params={"format": "csv"})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
        assert http.get("/invoices/2026-13").status_code == 422
        assert http.post("/admin/invoices/finalize", json={}).status_code == 403  # not an admin

    assert "finalised 0" in cli("admin", "invoices", "finalize").stdout  # nothing is past its grace window
    still_open = cli("admin", "invoices", "finalize", period, ok=False)
    assert still_open.returncode != 0 and "period_open" in still_open.stderr
    assert cli.json("invoices", token=alice) == listed  # finalising changed nothing
