"""examples/train.py, the README's example workload: it checkpoints atomically, stops on SIGTERM or
a preemption notice with a checkpoint and exit code 0, and a rerun resumes where it stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "train.py"
CHECKPOINT = "train-example.json"


def start(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.Popen[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DANLU_")}
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), *args],
        env={**clean, **env},
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def read_until_step(proc: subprocess.Popen[str], step: int) -> list[str]:
    """Lines of output until the job reports ``step`` (it prints and flushes one line per step)."""
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        assert line, f"exited early: {lines}"
        lines.append(line.rstrip("\n"))
        if line.startswith(f"step {step}/"):
            return lines
    raise AssertionError(f"step {step} never came: {lines[-5:]}")


def finish(proc: subprocess.Popen[str]) -> tuple[int, list[str]]:
    out, _ = proc.communicate(timeout=30)
    return proc.returncode, out.splitlines()


def checkpoint(folder: Path) -> dict[str, float]:
    state: dict[str, float] = json.loads((folder / CHECKPOINT).read_text())
    return state


def test_sigterm_saves_a_checkpoint_and_a_rerun_resumes_and_finishes(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    env = {"DANLU_CHECKPOINT_DIR": str(ckpt)}
    proc = start(env, "--steps", "120", "--sleep", "0.02")
    head = read_until_step(proc, 25)
    assert head[0].startswith("starting from step 0")
    proc.send_signal(signal.SIGTERM)
    code, tail = finish(proc)
    assert code == 0, tail
    assert tail[-1].startswith("SIGTERM: checkpoint saved at step ")
    stopped = checkpoint(ckpt)
    assert 25 <= stopped["step"] < 120
    assert f"at step {stopped['step']}," in tail[-1]
    assert [p.name for p in ckpt.iterdir()] == [CHECKPOINT]  # no temporary file left behind

    code, out = finish(start(env, "--steps", "120", "--sleep", "0"))
    assert code == 0, out
    assert out[0] == f"resumed from {ckpt / CHECKPOINT} at step {stopped['step']}"
    assert out[1].startswith(f"step {stopped['step'] + 1}/120 ")  # not from step 0
    assert not any(line.startswith("step 1/") for line in out)
    assert out[-1].startswith("done at step 120: y = ")
    resumed = checkpoint(ckpt)
    assert resumed["step"] == 120
    assert abs(resumed["w"] - 3) < 0.05 and abs(resumed["b"] - 1) < 0.05

    # the data of each step is fixed: an interrupted run ends with an uninterrupted run's weights
    code, _ = finish(start({"DANLU_CHECKPOINT_DIR": str(tmp_path / "straight")}, "--steps", "120", "--sleep", "0"))
    assert code == 0
    straight = checkpoint(tmp_path / "straight")
    assert (straight["w"], straight["b"]) == (resumed["w"], resumed["b"])

    code, out = finish(start(env, "--steps", "120", "--sleep", "0"))  # already done: nothing more to train
    assert code == 0 and out[-1].startswith("done at step 120")
    assert not any(line.startswith("step ") for line in out)


def test_a_preemption_notice_file_stops_it_with_a_checkpoint(tmp_path: Path) -> None:
    notice = tmp_path / "run" / "DANLU_PREEMPT_DEADLINE"
    notice.parent.mkdir()
    workspace = tmp_path / "workspace"
    env = {"DANLU_WORKSPACE": str(workspace), "DANLU_PREEMPT_FILE": str(notice)}
    proc = start(env, "--steps", "500", "--sleep", "0.02", "--save-every", "1000")
    read_until_step(proc, 10)
    notice.write_text("2026-12-04T18:00:00+00:00\n1796407200\n")
    code, tail = finish(proc)
    assert code == 0, tail
    assert tail[-1].startswith("preemption notice (deadline 2026-12-04T18:00:00+00:00): checkpoint saved at step ")
    state = checkpoint(workspace / "checkpoints")  # no DANLU_CHECKPOINT_DIR: under the workspace
    assert 10 <= state["step"] < 500


def test_without_danlu_variables_it_checkpoints_under_the_current_folder(tmp_path: Path) -> None:
    code, out = finish(start({}, "--steps", "5", "--sleep", "0", cwd=tmp_path))
    assert code == 0, out
    assert checkpoint(tmp_path / "checkpoints")["step"] == 5


def test_it_runs_from_its_text_as_the_readme_passes_it_into_a_sandbox(tmp_path: Path) -> None:
    """`python3 -c "$(cat examples/train.py)" --steps N`: the sandbox sees no repository."""
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT.read_text(), "--steps", "3", "--sleep", "0"],
        env={"DANLU_CHECKPOINT_DIR": str(tmp_path), "PATH": os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    assert "done at step 3: y = " in proc.stdout
