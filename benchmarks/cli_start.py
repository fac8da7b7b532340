"""The CLI's start-up (issue 29, target 5): CPU seconds (user + system, the process and its children) of one
``danlu`` command, ours beside references, in one run on this machine.

- **references**: ``python -c pass`` (the interpreter alone) and a bare typer app of one command with one option
  (the framework's floor: typer 0.29 builds a pydantic adapter per parameter when a command runs);
- **ours**: ``danlu --help``, ``danlu offers --help``, ``danlu offers``, ``danlu ps``, ``danlu advise --help``
  (the last three against a real server with one rental: session_latency.build), each as a user runs it;
- **before the lazy commands**: the same command lines with every command module registered first (what each
  command cost until this stop), so the gain is read from one run.

Medians of ``--rounds`` interleaved rounds. Target: ≤ 120 ms CPU for ``--help``, ``offers`` and ``ps``; ≤ 200 ms for
``advise``.

    python benchmarks/cli_start.py [--rounds 7] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from session_latency import build, served

BARE_TYPER = """
import typer
app = typer.Typer(add_completion=False)
@app.command()
def hello(count: int = 1) -> None:
    print("hello" * count)
app()
"""
# Every command module registered first, then the command line: what `danlu` did before this stop.
ALL_FIRST = "import sys\nfrom danlu.cli import main\nmain.app\nsys.argv = ['danlu', *sys.argv[1:]]\nmain.main()\n"


def cpu_of(argv: list[str], env: dict[str, str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(argv, env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"{argv} failed: {r.stderr[-800:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="danlu-bench-cli-"))
    os.chmod(root, 0o711)
    p, token = build(root)
    py = sys.executable
    lines = {
        "--help": ["--help"],
        "offers --help": ["offers", "--help"],
        "offers": ["offers"],
        "ps": ["ps"],
        "advise --help": ["advise", "--help"],
    }
    samples: dict[str, list[float]] = {}
    with served(p, root) as port:
        env = {**os.environ, "DANLU_URL": f"http://127.0.0.1:{port}", "DANLU_TOKEN": token, "COLUMNS": "100"}
        variants: dict[str, list[str]] = {
            "reference: python -c pass": [py, "-c", "pass"],
            "reference: bare typer app, one command": [py, "-c", BARE_TYPER, "--count", "2"],
        }
        for name, argv in lines.items():
            variants[f"danlu {name}"] = [py, "-m", "danlu.cli.main", *argv]
            variants[f"before (all modules): danlu {name}"] = [py, "-c", ALL_FIRST, *argv]
        for _ in range(args.rounds):
            for name, argv in variants.items():
                samples.setdefault(name, []).append(cpu_of(argv, env))
    med = {k: statistics.median(v) for k, v in samples.items()}
    floor = med["reference: bare typer app, one command"]
    rows: list[dict[str, Any]] = []
    for name, sec in med.items():
        target = 0.2 if "advise" in name else 0.12
        row = {"variant": name, "cpu_ms": round(sec * 1000, 1), "x_typer_floor": round(sec / floor, 2)}
        if name.startswith("danlu "):
            row["target_ms"] = target * 1000
            row["pass"] = sec <= target
            row["x_before"] = round(sec / med[f"before (all modules): {name}"], 2)
        rows.append(row)
    if args.json:
        print(json.dumps({"rounds": args.rounds, "rows": rows, "load": os.getloadavg()}))
        return 0
    print(f"CPU per command (user + system), median of {args.rounds} interleaved rounds, this machine "
          f"({os.cpu_count()} CPUs)")  # fmt: skip
    print(f"| {'variant':<44} | CPU ms | × typer floor | × before | target ms | pass |")
    print(f"|{'-' * 46}|--------|---------------|----------|-----------|------|")
    for r in rows:
        before = f"{r['x_before']:.2f}" if "x_before" in r else ""
        target = f"{r['target_ms']:.0f}" if "target_ms" in r else ""
        ok = ("PASS" if r["pass"] else "FAIL") if "pass" in r else ""
        cells = f"{r['cpu_ms']:6.1f} | {r['x_typer_floor']:13.2f} | {before:>8} | {target:>9} | {ok:>4}"
        print(f"| {r['variant']:<44} | {cells} |")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
