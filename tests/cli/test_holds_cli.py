"""Packages and reserved commitments through the CLI and the HTTP API, end to end: `danlu server`
and every command as real processes, on SQLite and PostgreSQL (issue 9 part 2)."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.cli.test_contract import Cli, server  # noqa: F401 - the real-server fixture


@pytest.mark.slow
def test_a_package_bought_with_a_rental_shown_kept_while_stopped_and_cancelled_with_a_quote(
    server: tuple[str, Path],  # noqa: F811
) -> None:
    url, data = server
    cli = Cli(url, (data / "admin-token").read_text().strip())
    cli("admin", "price", "set", "A100-80GB", "36.00")
    cli("admin", "price", "set", "T4", "3.60")
    assert "no packages" in cli("plans").stdout  # nothing is on sale until the operator says so
    term: Any = cli.json("admin", "plan", "set", "package-week", "--discount", "20", "--cancel-fee", "10")
    assert (term["discount"], term["cancel_fee"]) == ("20%", "10%")
    cli("admin", "plan", "set", "reserved-3m", "--discount", "35")
    bad = cli("admin", "plan", "set", "reserved-3m", "--discount", "35", "--cancel-fee", "5", ok=False)
    assert bad.returncode != 0 and "invalid_percent" in bad.stderr
    [week, reserved] = cli.json("plans")  # type: ignore[misc]
    assert week["prices"] == {"A100-80GB": "4838.40", "T4": "483.84"} and reserved["term"] == "reserved-3m"
    assert "4838.40" in cli("plans").stdout

    ann = cli.json("admin", "user", "create", "ann")["token"]  # type: ignore[index]
    cli("admin", "topup", "ann", "5000.00")
    # Without --yes, --json prints the quote and buys nothing.
    asked = cli(
        "rent", "--gpu", "A100-80GB", "--package", "package-week", "--json", "--", "sleep", "600", ok=False, token=ann
    )
    assert asked.returncode != 0 and "confirmation_required" in asked.stderr
    assert json.loads(asked.stdout)["price"] == "4838.40"
    assert cli.json("balance", token=ann)["balance"] == "5000.00"  # type: ignore[index]
    said = cli("rent", "--gpu", "A100-80GB", "--package", "package-week", "--yes", "--", "sleep", "600", token=ann)
    assert "4838.40" in said.stdout and "on h-" in said.stdout, said.stdout
    [inst] = cli.json("ps", token=ann)  # type: ignore[misc]
    [hold] = cli.json("holds", token=ann)  # type: ignore[misc]
    assert inst["hold_id"] == hold["id"] and hold["in_use_by"] == [inst["id"]] and hold["paid"] == "4838.40"
    assert cli.json("balance", token=ann)["balance"] == "161.60"  # type: ignore[index]
    cli("stop", inst["id"], token=ann)

    # Stopped, its GPU stays ann's: bob gets the one other A100, then none.
    bob = cli.json("admin", "user", "create", "bob")["token"]  # type: ignore[index]
    cli("admin", "topup", "bob", "10.00")
    bobs = json.loads(cli("rent", "--gpu", "A100-80GB", "--json", "--", "sleep", "600", token=bob).stdout)["id"]
    full = cli("rent", "--gpu", "A100-80GB", "--", "sleep", "600", ok=False, token=bob)
    assert full.returncode != 0 and "no_capacity" in full.stderr
    [offer] = [o for o in cli.json("offers") if o["gpu_model"] == "A100-80GB"]  # type: ignore[attr-defined]
    assert offer["free"] == 0

    # Another tenant: 404 on the hold through the API, as on everything else.
    with httpx.Client(base_url=url + "/api/v1", headers={"Authorization": f"Bearer {bob}"}) as h:
        assert h.get(f"/holds/{hold['id']}").status_code == 404
        r = h.post(f"/holds/{hold['id']}/cancel-quote")
        assert (r.status_code, r.json()["error"]["code"]) == (404, "hold_not_found")
        assert h.post(f"/holds/{hold['id']}/cancel", json={"quote_id": "q-00"}).status_code == 404

    # Cancel: the quote is printed first; the refund lands on the balance and on the invoice.
    quoted = cli("hold", "cancel", hold["id"], "--json", ok=False, token=ann)
    assert quoted.returncode != 0 and "confirmation_required" in quoted.stderr
    refund = Decimal(json.loads(quoted.stdout)["refund"])
    assert Decimal("4354.00") < refund <= Decimal("4354.56")  # 90 % of the unused part, seconds in
    done = cli("hold", "cancel", hold["id"], "--yes", token=ann)
    assert "cancelled; refunded" in done.stdout
    [after] = cli.json("holds", token=ann)  # type: ignore[misc]
    assert after["state"] == "cancelled" and Decimal(after["refunded"]) <= refund
    [draft] = cli.json("invoices", token=ann)  # type: ignore[misc]
    amounts = {line["description"].split(" ")[0]: Decimal(line["amount"]) for line in draft["lines"]}
    assert amounts["package-week"] == Decimal("4838.40") and amounts["refund"] == -Decimal(after["refunded"])
    balance = Decimal(cli.json("balance", token=ann)["balance"])  # type: ignore[index]
    assert balance == Decimal("5000.00") - Decimal(draft["total"])  # the invoice is what left the balance
    admin_gpus = cli.json("admin", "gpus")
    assert all(g["hold_id"] is None for g in admin_gpus)  # type: ignore[union-attr]
    for who, instance_id in ((bob, bobs), (ann, inst["id"])):  # runs outlive their server: end them
        cli("rm", instance_id, token=who)
