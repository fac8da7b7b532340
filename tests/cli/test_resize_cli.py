"""`danlu start ID --gpu M --count N` (issue 26, item 3): the new shape's hourly price is shown and
confirmed before anything starts (`--yes`; `--json` without it prints the price and starts nothing),
and the server holds the start to that price."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.cli.test_contract import Cli, server  # noqa: F401 - the real-server fixture

# One database: the CLI over the API, which tests/api/test_resize.py runs on both databases.
pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


def test_start_resized_shows_the_price_first_and_keeps_the_workspace(server: tuple[str, Path]) -> None:  # noqa: F811
    url, data = server
    cli = Cli(url, (data / "admin-token").read_text().strip())
    cli("admin", "price", "set", "A100-80GB", "36.00")
    cli("admin", "price", "set", "T4", "3.60")
    uma = cli.json("admin", "user", "create", "uma")["token"]  # type: ignore[index]
    cli("admin", "topup", "uma", "500.00")
    cmd = "cat note.txt 2>/dev/null; echo kept > note.txt; sleep 600"
    iid = json.loads(cli("rent", "--gpu", "T4", "--json", "--", "sh", "-c", cmd, token=uma).stdout)["id"]
    cli("stop", iid, token=uma)
    deadline = time.monotonic() + 60
    while cli.json("show", iid, token=uma)["status"] != "stopped":  # type: ignore[index]
        assert time.monotonic() < deadline
        time.sleep(0.2)

    asked = cli("start", iid, "--gpu", "A100-80GB", "--count", "2", "--json", ok=False, token=uma)
    assert asked.returncode != 0 and "confirmation_required" in asked.stderr
    assert json.loads(asked.stdout)["price_per_hour"] == "72.00"
    assert cli.json("show", iid, token=uma)["status"] == "stopped"  # type: ignore[index]
    said = cli("start", iid, "--gpu", "A100-80GB", "--count", "2", "--yes", token=uma)
    assert f"{iid}: 1× T4 → 2× A100-80GB at 72.00 CNY/h" in said.stdout and "running on GPUs" in said.stdout
    shown = cli.json("show", iid, token=uma)
    assert (shown["gpu_model"], shown["gpu_count"]) == ("A100-80GB", 2)  # type: ignore[index]
    nowhere = cli("start", iid, "--gpu", "NoSuchGPU", "--yes", ok=False, token=uma)
    assert nowhere.returncode != 0 and "model_not_offered" in nowhere.stderr
    cli("rm", iid, token=uma)
