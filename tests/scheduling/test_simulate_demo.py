"""`danlu simulate` with no data of its own: the demo shipped in the package, from any folder, and
its live status line (a terminal's stderr only, never with --json)."""

from __future__ import annotations

import io
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

from danlu.cli.simulate_cmds import StatusLine
from danlu.scheduling.replay import DEMO_SCENARIO, demo_dir

DANLU = [sys.executable, "-m", "danlu.cli.main"]
POLICIES = {"fifo", "backfill", "danlu", "danlu-cost"}


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "250", "NO_COLOR": "1"}
    return subprocess.run([*DANLU, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_simulate_with_no_arguments_runs_the_demo_from_any_folder(tmp_path: Path) -> None:
    proc = run("simulate", cwd=tmp_path)  # no ../shared/data from here
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("demo: the built-in scenario demo16 (16 GPUs: K80, P100, V100)")
    assert any("demo16 / max_min_fairness_first40" in line for line in lines)
    rows = {}
    for line in lines:
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if line.startswith("│") and len(cells) > 2:
            rows[cells[0]] = cells
    assert set(rows) >= POLICIES, proc.stdout
    for cells in rows.values():
        assert int(cells[1]) > 0  # jobs done
    assert "off-peak' is a synthetic assumption" in proc.stdout
    assert "jobs done" not in proc.stderr  # stderr is a pipe here: no status line


def test_demo_json_and_a_scenario_without_trace(tmp_path: Path) -> None:
    proc = run("simulate", "--demo", "--policies", "fifo,danlu", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)  # the demo note went to stderr, the JSON stays clean
    assert [r["policy"] for r in rows] == ["fifo", "danlu"]
    assert all(r["jobs"] == r["jobs_completed"] == 40 and r["trace"] == "max_min_fairness_first40" for r in rows)
    assert "demo:" in proc.stderr

    proc = run("simulate", "--scenario", str(demo_dir() / DEMO_SCENARIO), "--policies", "fifo", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[0]["trace"] == "max_min_fairness_first40"  # the scenario's first trace
    assert "demo:" not in proc.stderr

    bad = run("simulate", "--demo", "--trace", "x.trace", cwd=tmp_path)
    assert bad.returncode != 0 and "--demo" in bad.stderr
    bad = run("simulate", "--trace", "x.trace", cwd=tmp_path)
    assert bad.returncode != 0 and "--trace needs --scenario" in bad.stderr


def on_a_terminal(*args: str, cwd: Path) -> tuple[int, str, str]:
    """Run with stderr on a pseudo-terminal: (exit code, stdout, what the terminal showed)."""
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "250", "NO_COLOR": "1"}
    proc = subprocess.Popen([*DANLU, *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=slave, text=True)
    os.close(slave)
    shown = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(master)
    out, _ = proc.communicate(timeout=120)
    return proc.returncode, out, shown.decode()


def test_a_live_status_line_on_a_terminal_and_none_with_json(tmp_path: Path) -> None:
    code, out, shown = on_a_terminal("simulate", "--policies", "fifo,danlu", cwd=tmp_path)
    assert code == 0, shown
    assert "simulating fifo (1/2): " in shown and "simulating danlu (2/2): " in shown
    assert "40/40 jobs done, " in shown and " h simulated" in shown
    assert shown.endswith("\r\x1b[K")  # erased before the table
    assert "jobs done" not in out

    code, out, shown = on_a_terminal("simulate", "--policies", "fifo", "--json", cwd=tmp_path)
    assert code == 0, shown
    assert "jobs done" not in shown and json.loads(out)[0]["jobs_completed"] == 40


def test_status_line_redraws_at_most_every_interval_but_always_the_last() -> None:
    stream = io.StringIO()
    line = StatusLine(stream, start_ms=0, policies=2, every_s=3600)
    line.begin("fifo", 1)
    line.update(0, 10, 0)
    line.update(5, 10, 1_800_000)  # within the interval: not drawn
    line.update(10, 10, 7_200_000)  # the last: drawn
    line.clear()
    assert stream.getvalue() == (
        "\r\x1b[Ksimulating fifo (1/2): 0/10 jobs done, 0.0 h simulated"
        "\r\x1b[Ksimulating fifo (1/2): 10/10 jobs done, 2.0 h simulated"
        "\r\x1b[K"
    )


def test_a_trace_with_unmeasured_and_dynamic_batch_jobs_runs_and_says_so(tmp_path: Path) -> None:
    """Issue 30: the default replays a trace whose jobs lack a measured throughput (estimated, or
    skipped when nothing can be scaled) and reads Shockwave's 12 columns; each is counted in a note."""
    demo = demo_dir()
    scenario = json.loads((demo / DEMO_SCENARIO).read_text(encoding="utf-8"))
    scenario["throughputs"] = str(demo / scenario["throughputs"])
    scenario["traces"] = []
    (tmp_path / "s.json").write_text(json.dumps(scenario), encoding="utf-8")
    lines = [
        "LM (batch size 40)\tc\tw\t--s\t1\t20000\t1\tstatic\t1\t-1\t600\t0",
        "LM (batch size 40)\tc\tw\t--s\t1\t20000\t3\tgns\t1\t-1\t10",  # 11 columns; no row for 3 GPUs
        "NoSuchNet (batch size 1)\tc\tw\t--s\t1\t20000\t1\tstatic\t1\t-1\t0\t20",  # nothing to scale
    ]
    (tmp_path / "t.trace").write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = ("simulate", "--scenario", "s.json", "--trace", "t.trace", "--policies", "danlu")
    proc = run(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "note: 1 job(s) had no measured throughput for their GPU count" in proc.stdout
    assert "note: 1 job(s) had no measured throughput (none to scale, or --missing skip) and were not replayed: j2" in (
        proc.stdout
    )
    assert "note: 1 job(s) change their batch size as they train" in proc.stdout
    [row] = json.loads(run(*args, "--missing", "skip", "--json", cwd=tmp_path).stdout)
    assert (row["jobs"], row["jobs_completed"], row["jobs_skipped"], row["skipped"]) == (3, 1, 2, ["j1", "j2"])
    refused = run(*args, "--missing", "refuse", cwd=tmp_path)
    assert refused.returncode != 0 and "missing_throughput" in refused.stderr and "j1" in refused.stderr
