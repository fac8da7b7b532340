"""The issue-9 CLI contract, end to end: `danlu server` and every command as real processes, on
SQLite and PostgreSQL: a sign-up voucher pays before the balance; a team pays for its member."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_contract import Cli, server  # noqa: F401 - the real-server fixture
from tests.conftest import wait_for


@pytest.mark.slow
def test_vouchers_and_teams_contract(server: tuple[str, Path]) -> None:  # noqa: F811
    url, data = server
    cli = Cli(url, (data / "admin-token").read_text().strip())
    cli("admin", "price", "set", "A100-80GB", "36.00")
    cli("admin", "price", "set", "T4", "3.60")
    cli(
        "admin",
        "voucher",
        "campaign",
        "create",
        "welcome",
        "--amount",
        "100.00",
        "--valid-for",
        "72h",
        "--on",
        "signup",
    )
    alice = cli.json("admin", "user", "create", "alice")["token"]  # type: ignore[index]
    cli("admin", "topup", "alice", "10.00")

    [voucher] = cli.json("vouchers", token=alice)  # type: ignore[misc]
    assert voucher["remaining"] == "100.00" and voucher["expires_at"].startswith("20"), voucher
    rented = json.loads(cli("rent", "--gpu", "A100-80GB", "--json", "--", "sleep", "60", token=alice).stdout)

    def left() -> str:
        return str(cli.json("vouchers", token=alice)[0]["remaining"])  # type: ignore[index]

    wait_for(lambda: left() != "100.00", timeout=30)
    cli("rm", rented["id"], token=alice)
    assert float(left()) < 100.0
    assert cli.json("balance", token=alice)["balance"] == "10.00"  # type: ignore[index]

    bob = cli.json("admin", "user", "create", "bob")["token"]  # type: ignore[index]
    eve = cli.json("admin", "user", "create", "eve")["token"]  # type: ignore[index]
    team = cli.json("team", "create", "lab", token=alice)
    assert team["role"] == "owner"  # type: ignore[index]
    cli("team", "add", "lab", "bob", "--role", "member", token=alice)
    cli("admin", "team", "topup", "lab", "50.00")
    assert cli.json("balance", "--team", "lab", token=bob)["balance"] == "50.00"  # type: ignore[index]
    bob_personal = cli.json("balance", token=bob)["balance"]  # type: ignore[index]
    iid = json.loads(cli("rent", "--team", "lab", "--gpu", "T4", "--json", "--", "sleep", "60", token=bob).stdout)["id"]
    wait_for(lambda: cli.json("balance", "--team", "lab", token=bob)["balance"] != "50.00", timeout=30)  # type: ignore[index]
    assert cli.json("balance", token=bob)["balance"] == bob_personal  # type: ignore[index]
    outsider = cli("show", iid, "--json", ok=False, token=eve)
    assert outsider.returncode != 0 and "instance_not_found" in outsider.stderr
    assert "team_not_found" in cli("team", "show", "lab", ok=False, token=eve).stderr
    listed = cli.json("admin", "team", "list")
    assert [t["name"] for t in listed] == ["lab"]  # type: ignore[union-attr,index]
    cli("rm", iid, token=bob)
