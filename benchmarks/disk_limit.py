"""The kernel's disk limit (danlu.compute.sandbox.volume) against a plain folder on the host's file system,
in one run on this machine (root, loop devices).

Three things a workspace on its own ext4 image costs or saves, each beside its reference:
- **writing**: ``dd`` of ``--mib`` MiB (1 MiB blocks, ``conv=fsync``) into the workspace's file system vs
  into a folder of the host's file system (the reference; what ``--disk-limit watch`` uses);
- **small files**: ``--files`` files of 4 KiB created and fsynced at the end (``tar -x``) on each;
- **measuring the use**: the disk watcher's walk of that folder (``disk.usage``, what ``watch`` does every
  15 s per running sandbox) vs ``statvfs`` of the file system (what it does on an image);
- **making it**: ``volume.ensure`` of a new workspace at 100 GiB (mkfs, mount, fit), once per round.

Rounds interleaved; medians.

    python benchmarks/disk_limit.py [--mib 512] [--files 20000] [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from danlu.compute.sandbox import disk, volume

MiB = 1 << 20


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def sh(cmd: str) -> None:
    r = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{cmd} failed: {r.stderr[-500:]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    ok, why = volume.available()
    if not ok:
        raise SystemExit(f"kernel disk limits are not available here: {why}")
    root = Path(tempfile.mkdtemp(prefix="danlu-bench-disk-"))
    plain, image = root / "sandbox" / "plain" / "ws", root / "sandbox" / "workspaces" / "ws"
    plain.mkdir(parents=True)
    volume.ensure(image, 2 * args.mib * MiB + args.files * 8192, disk.file_limit(0) + args.files * 2)
    tar = root / "small.tar"
    src = root / "small"
    src.mkdir()
    for i in range(args.files):
        (src / f"f{i}").write_bytes(os.urandom(4096))
    sh(f"tar -C {src} -cf {tar} .")
    samples: dict[str, list[float]] = {}

    def add(name: str, seconds: float) -> None:
        samples.setdefault(name, []).append(seconds)

    try:
        for r in range(args.rounds):
            kinds = (("host folder (reference)", plain), ("own ext4 image (ours)", image))
            for _, folder in kinds:
                for entry in list(folder.iterdir()):
                    shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
            for kind, folder in kinds:
                add(f"write {args.mib} MiB: {kind}", timed(lambda f=folder: sh(
                    f"dd if=/dev/zero of={f}/big bs=1M count={args.mib} conv=fsync status=none")))  # fmt: skip
            for kind, folder in kinds:
                (folder / "small").mkdir()
                add(f"untar {args.files} files: {kind}", timed(lambda f=folder: sh(
                    f"tar -C {f}/small -xf {tar} && sync -f {f}/small")))  # fmt: skip
            add(
                f"measure {args.files} files: walk (watch, reference)",
                timed(lambda: disk.usage((str(plain),), 10**9)),
            )
            add(f"measure {args.files} files: statvfs (image, ours)", timed(lambda: disk.fs_usage(str(image))))
            fresh = root / "sandbox" / "workspaces" / f"new{r}"
            made = timed(lambda f=fresh: volume.ensure(f, 100 << 30, 10**6))
            add("make a 100 GiB workspace (mkfs, mount, fit)", made)
            volume.release(fresh)
    finally:
        volume.release(image)
        shutil.rmtree(root, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in samples.items()}
    names = list(med)
    rows: list[dict[str, Any]] = []
    for i in range(0, len(names) - 1, 2):
        ref, ours = names[i], names[i + 1]
        rows += [
            {"variant": ref, "median_s": med[ref], "x_reference_time": 1.0},
            {"variant": ours, "median_s": med[ours], "x_reference_time": med[ours] / med[ref]},
        ]
    rows.append({"variant": names[-1], "median_s": med[names[-1]], "x_reference_time": None})
    if args.json:
        print(json.dumps({"mib": args.mib, "files": args.files, "rounds": args.rounds, "rows": rows,
                          "load": os.getloadavg()}))  # fmt: skip
        return 0
    print(f"median of {args.rounds} interleaved rounds, this machine ({os.cpu_count()} CPUs)")
    print(f"| {'variant':<52} | median s | × reference time |")
    print(f"|{'-' * 54}|----------|------------------|")
    for row in rows:
        x = "" if row["x_reference_time"] is None else f"{row['x_reference_time']:.3f}"
        print(f"| {row['variant']:<52} | {row['median_s']:8.4f} | {x:>16} |")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
