"""Budgets, the student discount, tariffs and stopped storage through the CLI, end to end:
`danlu server` and every command as real processes, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.cli.test_contract import Cli, server  # noqa: F401 - the real-server fixture
from tests.conftest import wait_for


def test_a_hard_budget_stops_an_instance_exactly_at_its_cap(server: tuple[str, Path]) -> None:  # noqa: F811
    url, data = server
    cli = Cli(url, (data / "admin-token").read_text().strip())
    cli("admin", "price", "set", "A100-80GB", "36.00")  # 1 fen per GPU-second
    cli("admin", "storage", "set", "--price-gb-month", "0.30")
    hank = cli.json("admin", "user", "create", "hank")["token"]  # type: ignore[index]
    cli("admin", "topup", "hank", "10.00")
    capped = json.loads(cli("rent", "--gpu", "A100-80GB", "--json", "--", "sleep", "600", token=hank).stdout)["id"]
    budget: Any = cli.json("budget", "set", "--instance", capped, "--period", "total", "--hard", "0.05", token=hank)
    assert (budget["scope"], budget["hard"], budget["period"]) == (f"instance:{capped}", "0.05", "total")
    both = cli("budget", "set", "--member", "hank", "--instance", capped, "--hard", "1", ok=False, token=hank)
    assert both.returncode != 0 and "invalid_budget_scope" in both.stderr

    def shown() -> dict[str, Any]:
        return json.loads(cli("show", capped, "--json", token=hank).stdout)  # type: ignore[no-any-return]

    wait_for(lambda: shown()["status"] == "stopped", timeout=60)
    assert shown()["cost"] == "0.05"  # billed exactly up to the cap, the notice period not at all
    [listed] = cli.json("budget", "list", token=hank)  # type: ignore[misc]
    assert (listed["id"], listed["spent"]) == (budget["id"], "0.05")
    assert "0.05" in cli("budget", "list", token=hank).stdout
    text = cli("show", capped, token=hank).stdout
    assert "storage/day" in text and "released at" in text, text  # a stopped instance keeps its workspace
    # At its cap it is not started again (it would run unpaid until the next meter pass stopped it), and a
    # refused stop says nothing of having stopped (both printed success lines before a newcomer's pass).
    again = cli("start", capped, ok=False, token=hank)
    assert again.returncode != 0 and "budget_cap_reached" in again.stderr and "running" not in again.stdout
    assert shown()["status"] == "stopped"
    twice = cli("stop", capped, ok=False, token=hank)
    assert twice.returncode != 0 and "invalid_state" in twice.stderr and twice.stdout == "", twice.stdout
    eve = cli.json("admin", "user", "create", "eve")["token"]  # type: ignore[index]
    denied = cli("budget", "rm", str(budget["id"]), ok=False, token=eve)
    assert denied.returncode != 0 and "budget_not_found" in denied.stderr
    assert "removed" in cli("budget", "rm", str(budget["id"]), token=hank).stdout
    assert cli.json("budget", "list", token=hank) == []
    cli("rm", capped, token=hank)


def test_student_discount_tariffs_and_storage_commands(server: tuple[str, Path]) -> None:  # noqa: F811
    url, data = server
    cli = Cli(url, (data / "admin-token").read_text().strip())
    cli("admin", "price", "set", "A100-80GB", "36.00")
    stu = cli.json("admin", "user", "create", "stu")["token"]  # type: ignore[index]

    assert "no student verification" in cli("student", "status", token=stu).stdout
    pending: Any = cli.json("student", "verify", "Tsinghua University", "--evidence", "stu@tsinghua.edu.cn", token=stu)
    assert pending["status"] == "pending"
    [req] = cli.json("admin", "student", "requests")  # type: ignore[misc]
    assert (req["user"], req["evidence"]) == ("stu", "stu@tsinghua.edu.cn")
    not_admin = cli("admin", "student", "approve", "stu", ok=False, token=stu)
    assert not_admin.returncode != 0 and "admin_only" in not_admin.stderr
    cli("admin", "student", "refuse", "stu", "--reason", "use your university e-mail")
    assert "use your university e-mail" in cli("student", "status", token=stu).stdout
    cli("student", "verify", "Tsinghua University", token=stu)
    approved = cli("admin", "student", "approve", "stu").stdout
    # The discount is still 0 %: the approval says how to give one (issue 28, finding 11: it gave 0 % silently).
    assert "approved" in approved and "danlu admin student discount PERCENT" in approved
    assert cli.json("admin", "student", "discount", "20") == {"percent": "20"}
    status: Any = cli.json("student", "status", token=stu)
    assert (status["status"], status["discount"]) == ("approved", "20")

    every = "mon,tue,wed,thu,fri,sat,sun"
    for name, start, end in (("am", "00:00", "12:00"), ("pm", "12:00", "00:00")):  # together: always in force
        rule: Any = cli.json(
            "admin", "tariff", "add", name, "--days", every, "--from", start, "--to", end, "--multiplier", "0.5"
        )
        assert (rule["from"], rule["to"], rule["multiplier"]) == (start, end, "0.5")
    bad = cli(
        "admin",
        "tariff",
        "add",
        "x",
        "--days",
        every,
        "--from",
        "23:00",
        "--to",
        "23:00",
        "--multiplier",
        "0.5",
        ok=False,
    )
    assert bad.returncode != 0 and "invalid_tariff" in bad.stderr
    [a100] = [o for o in cli.json("offers", token=stu) if o["gpu_model"] == "A100-80GB"]  # type: ignore[union-attr]
    assert (a100["price_per_hour"], a100["price_now"]) == ("36.00", "18.00"), a100
    assert a100["tariff_now"] in ("am", "pm")
    assert [t["name"] for t in cli.json("tariffs", token=stu)] == ["am", "pm"]  # type: ignore[union-attr]
    listed: Any = cli.json("admin", "tariff", "list")
    retired: Any = cli.json("admin", "tariff", "retire", str(listed[0]["id"]))
    assert retired["retired_at"] is not None
    assert [t["name"] for t in cli.json("admin", "tariff", "list")] == ["pm"]  # type: ignore[union-attr]
    assert len(cli.json("admin", "tariff", "list", "--all")) == 2  # type: ignore[arg-type]
    assert "pm" in cli("tariffs", token=stu).stdout

    policy: Any = cli.json("admin", "storage", "set", "--price-gb-month", "0.30", "--warn-after", "2d")
    assert (policy["price_gb_month"], policy["warn_after"], policy["release_after"]) == ("0.30", "2d", "7d")
    assert cli.json("admin", "storage", "show") == policy
    refused = cli("admin", "storage", "set", "--release-after", "5m", ok=False)
    assert refused.returncode != 0 and "invalid_storage_policy" in refused.stderr
    assert "0.30 CNY per GB-month" in cli("admin", "storage", "show").stdout
