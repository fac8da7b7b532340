"""The README's money lines, run in the README's order as a newcomer would (issue 28, finding 11: its own
order failed four times — bob never created, a team without balance, its budget blocking its package
example, a student approval giving 0 %). Each line is read from README.md itself, so a reordering that
breaks the walk breaks this test; a real `danlu server` and real `danlu` processes, one database."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_contract import DANLU, Cli, server  # noqa: F401 - the real-server fixture

pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
ROOT = Path(__file__).resolve().parents[2]
# The lines walked, by how they start, in the order the README must give them (the rest need an id or a terminal).
WALKED = (
    "danlu admin price set",
    "danlu admin user create",
    "danlu admin topup",
    "danlu admin plan set",
    "danlu admin student discount",
    "danlu team create",
    "danlu student verify",
    "danlu plans",
    "danlu rent --gpu T4 --package",
    "danlu budget set",
)


def try_it_lines() -> list[str]:
    """The "Try it" block's commands, comments cut, in order."""
    text = (ROOT / "README.md").read_text()
    block = text.split("## Try it", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    return [re.sub(r"\s+#.*$", "", line).strip() for line in block.splitlines() if line.strip()]


def test_the_readmes_money_lines_work_in_its_order(server: tuple[str, Path]) -> None:  # noqa: F811
    url, data = server
    admin = (data / "admin-token").read_text().strip()
    cli = Cli(url, admin)
    lines = [line for line in try_it_lines() if line.startswith(WALKED)]
    # Every walked kind of line is there: the test would pass vacuously on a README that lost them.
    assert {w for w in WALKED if any(line.startswith(w) for line in lines)} == set(WALKED), lines
    bin_dir = str(Path(DANLU[0]).parent)
    env = {**cli.env, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    alice = ""
    for line in lines:
        if line.startswith("danlu student verify"):  # the README's `export DANLU_TOKEN=<alice's token>` came before
            assert alice
        if line.startswith("danlu plans"):  # the README's comment: the operator approves the request first
            cli("admin", "student", "approve", "alice")
        as_json = " --json" if line == "danlu admin user create alice" else ""  # to read her token
        run = subprocess.run(
            ["bash", "-c", line + as_json],
            cwd=ROOT,
            env={**env, "DANLU_TOKEN": admin if line.startswith("danlu admin") else alice},
            capture_output=True,
            text=True,
            input="y\n",  # what a newcomer answers when asked to confirm a price
            timeout=120,
        )
        assert run.returncode == 0, (line, run.stdout, run.stderr)
        if as_json:
            alice = json.loads(run.stdout)["token"]
    status: Any = cli.json("student", "status", token=alice)
    assert (status["status"], status["discount"]) == ("approved", "10")
    [hold] = cli.json("holds", token=alice)  # type: ignore[misc]
    assert hold["term"] == "package-day"
