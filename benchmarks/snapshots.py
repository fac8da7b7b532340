"""Snapshots, restore and resize (issue 26) against copying the same workspace on this disk, in one run.

One platform built as ``danlu server`` builds it (SQLite, simulated T4s, the sandbox; session_latency.build),
served on a real port, one rental whose workspace holds ``--mib`` of random bytes (incompressible, so
nothing is saved by compression, and restic 0.14 does not compress anyway), stopped. Timed over HTTP, as a
renter's request:

* the first snapshot (restic: read, chunk, hash, encrypt, write) and a second of the unchanged workspace
  (issue 26's target: at most 10 % of the first's time);
* a new rental from the snapshot (``from_snapshot``: restore, then claim and launch; target: restore at
  least 100 MiB/s);
* a resize on start, 1 → 2 GPUs (target: at most 5 s for 1 GiB; on one machine the workspace does not move);

beside the reference: ``cp -a`` of the same workspace folder on the same disk, and ``sha256sum`` of it (what
reading it once costs).

    python benchmarks/snapshots.py [--mib 1024] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from session_latency import build, served

from danlu.db.models import Instance
from danlu.server.loop import ControlLoop


def timed(fn: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="danlu-bench-snap-"))
    os.chmod(root, 0o711)
    p, token = build(root)
    with p.db.read() as s:
        inst = s.query(Instance).one()
        iid, workspace = inst.id, Path(str(inst.workspace))
    uid = workspace.stat().st_uid
    with open(workspace / "weights.bin", "wb") as f:
        for _ in range(args.mib):
            f.write(os.urandom(1 << 20))
    os.chown(workspace / "weights.bin", uid, uid)
    rows: list[dict[str, Any]] = []
    loop = ControlLoop(p)  # stops become "stopped" on its reconcile pass, as in `danlu server`
    loop.start()
    with served(p, root) as port:
        c = httpx.Client(base_url=f"http://127.0.0.1:{port}/api/v1", headers={"Authorization": f"Bearer {token}"},
                         timeout=3600)  # fmt: skip
        assert c.post(f"/instances/{iid}/stop").status_code == 200
        while c.get(f"/instances/{iid}").json()["status"] != "stopped":
            time.sleep(0.1)
        subprocess.run(["sync"], check=True)
        ref_cp, _ = timed(lambda: subprocess.run(["cp", "-a", str(workspace), str(root / "ref-copy")], check=True))
        ref_read, _ = timed(lambda: subprocess.run(["sha256sum", str(workspace / "weights.bin")], check=True,
                                                   capture_output=True))  # fmt: skip
        first_s, first = timed(lambda: c.post(f"/instances/{iid}/snapshots", json={"name": "first"}).json())
        second_s, second = timed(lambda: c.post(f"/instances/{iid}/snapshots", json={"name": "second"}).json())
        body = {"gpu_model": "T4", "command": ["sleep", "3000"], "from_snapshot": first["id"]}
        restore_s, new = timed(lambda: c.post("/instances", json=body).json())
        assert new.get("status") == "running", new
        assert c.post(f"/instances/{new['id']}/stop").status_code == 200
        while c.get(f"/instances/{new['id']}").json()["status"] != "stopped":
            time.sleep(0.1)
        resize_s, resized = timed(lambda: c.post(f"/instances/{iid}/start", json={"gpu_count": 2}).json())
        assert resized.get("gpu_count") == 2, resized
        mib = args.mib
        rows = [
            {"what": "reference: cp -a of the workspace (same disk)", "s": ref_cp, "mib_per_s": mib / ref_cp},
            {"what": "reference: sha256sum of it (one read)", "s": ref_read, "mib_per_s": mib / ref_read},
            {"what": "first snapshot (HTTP, restic)", "s": first_s, "mib_per_s": mib / first_s,
             "stored_new_mib": first["added_bytes"] / 2**20},
            {"what": "second snapshot, unchanged", "s": second_s, "x_first": second_s / first_s,
             "stored_new_mib": second["added_bytes"] / 2**20},
            {"what": "new rental from the snapshot (restore + claim + launch)", "s": restore_s,
             "mib_per_s": mib / restore_s, "x_cp": ref_cp / restore_s},
            {"what": "resize on start, 1 -> 2 GPUs", "s": resize_s},
        ]  # fmt: skip
    loop.stop()
    if args.json:
        print(json.dumps({"mib": args.mib, "rows": rows, "load": os.getloadavg()}))
        return 0
    print(f"{args.mib} MiB of random bytes in one workspace, one run, this machine ({os.cpu_count()} CPUs)")
    print(f"| {'what':<56} | seconds | MiB/s | note |")
    print(f"|{'-' * 58}|---------|-------|------|")
    for r in rows:
        note = ", ".join(f"{k} {v:.3f}" for k, v in r.items() if k not in ("what", "s", "mib_per_s"))
        speed = f"{r['mib_per_s']:5.0f}" if "mib_per_s" in r else "     "
        print(f"| {r['what']:<56} | {r['s']:7.2f} | {speed} | {note} |")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
