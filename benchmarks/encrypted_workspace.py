"""What encrypting a workspace at rest costs (``--encrypt-workspaces``, danlu.compute.sandbox.crypt), in one
run on this machine (root, loop devices, FUSE, gocryptfs).

Each figure beside its reference, the same workspace unencrypted on its own ext4 image (the default):
- **writing**: ``dd`` of ``--mib`` MiB (1 MiB blocks, ``conv=fsync``);
- **reading**: the same file back with ``dd`` after the page cache is dropped;
- **small files**: ``--files`` files of 4 KiB created and synced (``tar -x``);
- **opening**: the first mount of a new encrypted workspace (gocryptfs's key derivation and mount) against
  making its image.

Rounds interleaved; medians.

    python benchmarks/encrypted_workspace.py [--mib 256] [--files 5000] [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from disk_limit import sh, timed

from danlu.compute.sandbox import crypt, volume

MiB = 1 << 20


def drop_caches() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    for ok, why in (volume.available(), crypt.available()):
        if not ok:
            raise SystemExit(f"not available here: {why}")
    root = Path(tempfile.mkdtemp(prefix="danlu-bench-crypt-"))
    keys = root / "keys"
    plain, secret = root / "sandbox" / "workspaces" / "plain", root / "sandbox" / "workspaces" / "secret"
    size, files = 2 * args.mib * MiB + args.files * 8192, args.files * 2 + 10_000
    volume.prepare(plain, size, files, image=True, keys=keys, encrypt=False)
    volume.prepare(secret, size, files, image=True, keys=keys, encrypt=True)
    src, tar = root / "small", root / "small.tar"
    src.mkdir()
    for i in range(args.files):
        (src / f"f{i}").write_bytes(os.urandom(4096))
    sh(f"tar -C {src} -cf {tar} .")
    samples: dict[str, list[float]] = {}

    def add(name: str, seconds: float) -> None:
        samples.setdefault(name, []).append(seconds)

    kinds = (("ext4 image (reference)", plain), ("encrypted on its image (ours)", secret))
    try:
        for r in range(args.rounds):
            for _, folder in kinds:
                sh(f"rm -rf {folder}/big {folder}/small")
            for kind, folder in kinds:
                add(f"write {args.mib} MiB: {kind}", timed(lambda f=folder: sh(
                    f"dd if=/dev/zero of={f}/big bs=1M count={args.mib} conv=fsync status=none")))  # fmt: skip
            for kind, folder in kinds:
                drop_caches()
                add(f"read {args.mib} MiB: {kind}", timed(lambda f=folder: sh(
                    f"dd if={f}/big of=/dev/null bs=1M status=none")))  # fmt: skip
            for kind, folder in kinds:
                (folder / "small").mkdir()
                add(f"untar {args.files} files: {kind}", timed(lambda f=folder: sh(
                    f"tar -C {f}/small -xf {tar} && sync -f {f}/small")))  # fmt: skip
            fresh = [root / "sandbox" / "workspaces" / f"{k}{r}" for k in ("p", "s")]
            for (kind, _), folder, enc in zip(kinds, fresh, (False, True), strict=True):
                add(f"open a new 10 GiB workspace: {kind}", timed(lambda f=folder, e=enc: volume.prepare(
                    f, 10 << 30, 10**5, image=True, keys=keys, encrypt=e)))  # fmt: skip
            for f in fresh:
                volume.release(f, keys)
    finally:
        for folder in (plain, secret):
            volume.release(folder, keys)
        shutil.rmtree(root, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in samples.items()}
    names = list(med)
    rows: list[dict[str, Any]] = []
    for i in range(0, len(names), 2):
        ref, ours = names[i], names[i + 1]
        rows += [
            {"variant": ref, "median_s": med[ref], "x_reference_time": 1.0},
            {"variant": ours, "median_s": med[ours], "x_reference_time": med[ours] / med[ref]},
        ]
    if args.json:
        print(json.dumps({"mib": args.mib, "files": args.files, "rounds": args.rounds, "rows": rows,
                          "load": os.getloadavg()}))  # fmt: skip
        return 0
    print(f"median of {args.rounds} interleaved rounds, this machine ({os.cpu_count()} CPUs)")
    print(f"| {'variant':<62} | median s | × reference time |")
    print(f"|{'-' * 64}|----------|------------------|")
    for row in rows:
        print(f"| {row['variant']:<62} | {row['median_s']:8.4f} | {row['x_reference_time']:16.3f} |")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
