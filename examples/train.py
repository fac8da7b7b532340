#!/usr/bin/env python3
"""A tiny training job for trying danlu: fits y = 3x + 1 by SGD, in pure Python (no torch, no GPU).

It behaves the way a real job on danlu should:

* checkpoints to ``$DANLU_CHECKPOINT_DIR`` (a job's ``/checkpoints``, kept across runs), else to
  ``checkpoints/`` under ``$DANLU_WORKSPACE`` (a rental's ``/workspace``), else under the current
  folder; every write is atomic (a temporary file, then ``os.replace``);
* resumes from the last checkpoint, so a preempted or restarted run carries on where it stopped;
* on SIGTERM (or SIGINT), or when ``$DANLU_PREEMPT_FILE`` appears (a preemption notice), it saves
  a checkpoint and exits 0 at once, well within the notice period.

The data for step N is the same in every run, so an interrupted run ends with exactly the
weights of an uninterrupted one.

    python3 train.py --steps 200 --sleep 0.5
    danlu rent --gpu T4 -- python3 -c "$(cat examples/train.py)" --steps 200
    danlu run --gpus 1 --gpu T4 -- python3 -c "$(cat examples/train.py)" --steps 200
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import sys
import time
from pathlib import Path

CHECKPOINT = "train-example.json"
stop_reason = ""


def on_signal(signum: int, _frame: object) -> None:
    global stop_reason
    stop_reason = signal.Signals(signum).name


def checkpoint_dir() -> Path:
    explicit = os.environ.get("DANLU_CHECKPOINT_DIR")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("DANLU_WORKSPACE") or os.getcwd()) / "checkpoints"


def load(path: Path) -> dict[str, float]:
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        return {"step": 0, "w": 0.0, "b": 0.0}
    return {"step": int(state["step"]), "w": float(state["w"]), "b": float(state["b"])}


def save(path: Path, state: dict[str, float]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as handle:
        json.dump(state, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)  # a reader (or the next run) sees the old checkpoint or the new one, never half


def preempt_notice() -> str:
    """Why to stop now, or "" to carry on."""
    if stop_reason:
        return stop_reason
    notice = os.environ.get("DANLU_PREEMPT_FILE")
    if notice and os.path.exists(notice):
        try:
            deadline = Path(notice).read_text().split()[0]
        except (OSError, IndexError):
            deadline = "?"
        return f"preemption notice (deadline {deadline})"
    return ""


def batch(step: int, size: int = 16) -> list[tuple[float, float]]:
    rng = random.Random(step)  # the same data for a step in every run
    points = [rng.uniform(-1.0, 1.0) for _ in range(size)]
    return [(x, 3.0 * x + 1.0 + rng.gauss(0.0, 0.01)) for x in points]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100, help="train until this step (default 100)")
    parser.add_argument("--sleep", type=float, default=0.2, help="seconds per step, to stand in for real work")
    parser.add_argument("--lr", type=float, default=0.5, help="learning rate")
    parser.add_argument("--save-every", type=int, default=10, help="checkpoint every N steps (and on stop)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    path = checkpoint_dir() / CHECKPOINT
    state = load(path)
    if state["step"]:
        print(f"resumed from {path} at step {state['step']}", flush=True)
    else:
        print(f"starting from step 0; checkpoints go to {path}", flush=True)
    while state["step"] < args.steps:
        why = preempt_notice()
        if why:
            save(path, state)
            print(f"{why}: checkpoint saved at step {state['step']}, exiting", flush=True)
            return 0
        step = int(state["step"]) + 1
        data = batch(step)
        grad_w = sum(2 * (state["w"] * x + state["b"] - y) * x for x, y in data) / len(data)
        grad_b = sum(2 * (state["w"] * x + state["b"] - y) for x, y in data) / len(data)
        state["w"] -= args.lr * grad_w
        state["b"] -= args.lr * grad_b
        state["step"] = step
        loss = sum((state["w"] * x + state["b"] - y) ** 2 for x, y in data) / len(data)
        print(f"step {step}/{args.steps} loss {loss:.6f} w {state['w']:.4f} b {state['b']:.4f}", flush=True)
        if step % args.save_every == 0:
            save(path, state)
        deadline = time.monotonic() + args.sleep
        while not stop_reason and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, 0.05))
    save(path, state)
    ok = math.isclose(state["w"], 3.0, abs_tol=0.05) and math.isclose(state["b"], 1.0, abs_tol=0.05)
    print(f"done at step {state['step']}: y = {state['w']:.4f}x + {state['b']:.4f}", flush=True)
    if not ok:
        print("(not converged yet: run with more --steps)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
