"""kill -9 of a real `danlu server` while a demoted job is in its notice (issue 11, item 3): the restarted
server finishes the demotion, runs the short job, resumes the long one from its checkpoint, and the
ledger still balances. The operator's `--demote-after` / `--demote-slice` shrink 8 GPU-hours and 1 h to
a test's seconds."""

from __future__ import annotations

import os
import signal
import subprocess
from collections import defaultdict
from pathlib import Path

import httpx
import pytest

from danlu.db.engine import open_database
from tests.cli.test_contract import DANLU, Cli, end_server_runs, start_server
from tests.conftest import free_port, require_sandbox, sandbox_folder, wait_for
from tests.server.test_kill_drill import _load_drill

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow(seconds=40)]

# 40 steps of 0.25 s, a checkpoint at every step. SIGTERM comes with the notice; saving the last checkpoint
# takes 2 s of the 3 s notice, and the server is killed in those 2 s.
LONG = r"""
i=$(cat "$DANLU_CHECKPOINT_DIR/step" 2>/dev/null || echo 0)
echo "attempt $DANLU_ATTEMPT resumes at step $i"
save() {
  echo "saving step $i"; sleep 2; echo "$i" > "$DANLU_CHECKPOINT_DIR/step"; echo "checkpointed at step $i"; exit 0
}
trap save TERM
while [ "$i" -lt 40 ]; do i=$((i+1)); echo "$i" > "$DANLU_CHECKPOINT_DIR/step"; sleep 0.25; done
echo finished
"""
FLAGS = ("--simulate-gpus", "T4:2", "--preempt-notice", "3", "--demote-after", "1s", "--demote-slice", "1s")


def test_a_server_killed_during_a_demotion_notice_finishes_it_after_restart(db_url: str, tmp_path: Path) -> None:
    require_sandbox()
    data, renters = tmp_path / "data", sandbox_folder()
    proc, url = start_server(db_url, tmp_path, free_port(), *FLAGS, sandbox_dir=renters)
    try:
        cli = Cli(url, (data / "admin-token").read_text().strip())
        token = cli.json("admin", "user", "create", "dee")["token"]  # type: ignore[index]
        cli("admin", "topup", "dee", "50.00")
        cli("admin", "price", "set", "T4", "3.60")
        c = httpx.Client(base_url=url + "/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=10)
        r = c.post("/jobs", json={"command": ["sh", "-c", LONG], "gpus": 2, "est_duration_s": 7200})
        assert r.status_code == 201, r.text
        long_job = r.json()["id"]
        wait_for(lambda: "resumes at step 0" in c.get(f"/jobs/{long_job}/logs").json()["text"])
        r = c.post("/jobs", json={"command": ["sh", "-c", "echo short ran"], "gpus": 2, "est_duration_s": 5})
        short = r.json()["id"]
        wait_for(lambda: "saving step" in c.get(f"/jobs/{long_job}/logs").json()["text"], interval=0.05)
        assert c.get(f"/jobs/{long_job}").json()["status"] == "stopping"

        os.kill(proc.pid, signal.SIGKILL)  # in the middle of the notice: the run goes on without its server
        proc.wait(timeout=20)
        proc, url = start_server(db_url, tmp_path, free_port(), *FLAGS, sandbox_dir=renters)
        c = httpx.Client(base_url=url + "/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=10)

        wait_for(lambda: c.get(f"/jobs/{short}").json()["status"] == "succeeded", timeout=60)
        wait_for(lambda: c.get(f"/jobs/{long_job}").json()["status"] == "succeeded", timeout=60)
        view = c.get(f"/jobs/{long_job}").json()
        assert view["preemptions"] == 1 and view["attempts"] == 2, view
        events = c.get(f"/jobs/{long_job}/events").json()
        assert [e["to_status"] for e in events] == ["queued", "running", "stopping", "queued", "running", "succeeded"]
        assert any("demoted with notice" in e["reason"] for e in events if e["to_status"] == "stopping")
        log = c.get(f"/jobs/{long_job}/logs").json()["text"]
        resumed = [line for line in log.splitlines() if line.startswith("attempt 2 resumes at step")]
        saved = [line for line in log.splitlines() if line.startswith("checkpointed at step")]
        # From the checkpoint its notice let it write, not from 0 (how far it got first depends on the load).
        assert resumed and saved and resumed[0].split()[-1] == saved[-1].split()[-1] != "0", log
        assert log.rstrip().endswith("finished") and "checkpointed at step" in log
        assert "short ran" in c.get(f"/jobs/{short}/logs").json()["text"]
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        end_server_runs(db_url, data)

    drill = _load_drill("drill_checks")
    db = open_database(db_url)
    try:
        with db.read() as s:
            rows = drill.read_rows(s)  # type: ignore[attr-defined]
    finally:
        db.engine.dispose()
    violations: dict[str, list[str]] = defaultdict(list)
    for check in ("check_ledger", "check_stuck", "check_gpus"):
        getattr(drill, check)(rows, violations)
    assert not any(violations.values()), dict(violations)
    # the long job's first run and its notice (billed as interruptible from the demotion on), its second
    # run, the short job's run: each an instance with its allocations, in order
    plans: dict[str, list[str]] = defaultdict(list)
    for a in sorted(rows.allocations, key=lambda a: a.id):
        plans[a.instance_id].append(a.plan)
    assert sorted(plans.values()) == [["on-demand"], ["on-demand"], ["on-demand", "interruptible"]], dict(plans)


def test_demotion_flags_are_checked_before_the_server_starts(tmp_path: Path) -> None:
    base = [*DANLU, "server", "--data-dir", str(tmp_path / "d"), "--simulate-gpus", "T4:1"]
    for flags, said in (
        (["--policy", "fifo", "--demote-after", "8h"], "policy fifo never demotes"),
        (["--demote-after", "8 hours"], "--demote-after is a duration such as 90s"),
        (["--demote-slice", "0s"], "--demote-slice is a duration such as 90s"),
    ):
        proc = subprocess.run([*base, *flags], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and "[invalid_demotion]" in proc.stderr and said in proc.stderr, proc.stderr
        assert not (tmp_path / "d" / "danlu.db").exists()  # nothing was created
