"""Rentals and jobs through a real Slurm cluster (`make slurm-dev`: slurmctld + slurmd from Debian's
packages, 4 GRES gpu:a100 backed by plain files), on SQLite and PostgreSQL.

One module, so one test worker drives the one cluster at a time. Billing is checked against
Slurm's own records: the billed seconds of a run are its job's EndTime - StartTime.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from danlu.backend import RunUsage
from danlu.billing import service as billing
from danlu.compute.backends.slurm import SlurmBackend, SlurmCli, SlurmConfig, discover
from danlu.compute.backends.slurm_parse import RUNNING_STATES, JobRecord, node_usable
from danlu.compute.reconcile import meter_all, reconcile
from danlu.compute.sandbox.probe import make_local_backend
from danlu.context import Platform, Settings
from danlu.core.clock import SystemClock
from danlu.db.engine import open_database
from danlu.db.models import AllocationRow, Instance, User
from danlu.server.bootstrap import bootstrap
from tests.conftest import (
    WORKER_UIDS,
    LiveServer,
    _from_migrated_template,
    end_runs,
    sandbox_folder,
    wait_for,
    worker_uid_first,
)
from tests.scheduling.test_live_jobs import RESUMABLE

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "slurm-dev.sh"
# About 100 s for the module (each test drives the one cluster in turn): it starts first under xdist.
pytestmark = [pytest.mark.slow(seconds=110), pytest.mark.timeout(300)]


def dev(*args: str) -> str:
    done = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"slurm-dev.sh {' '.join(args)}: {done.stderr[-1500:]}"
    return done.stdout


@pytest.fixture(scope="module")
def slurm_conf() -> Path:
    done = subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        why = f"the development Slurm cluster (tools/slurm-dev.sh) did not start: {done.stderr[-1500:]}"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    flags = done.stdout.split()
    assert flags[:2] == ["--backend", "slurm"]  # the contract `make slurm-dev` prints
    return Path(flags[flags.index("--slurm-conf") + 1])


def wait_cluster_idle(config: SlurmConfig) -> None:
    """Each test's platform has a database of its own but all share one cluster: the jobs an earlier
    test cancelled must be gone (not COMPLETING) before this one counts on all 4 GPUs."""
    cli = SlurmCli(config)
    wait_for(lambda: not [j for j in cli.squeue().values() if j.state in ("RUNNING", "COMPLETING", "PENDING")], 60)
    # and its node is back in service (after a test killed slurmd): a down node's GPUs are not offered
    wait_for(
        lambda: all(node_usable(line.split("|")[1]) for line in cli.run("sinfo", "-h", "-N", "-o", "%N|%T").split()),
        120,
    )


def slurm_platform(db_url: str, data_dir: Path, conf: Path, **settings: Any) -> tuple[Platform, str]:
    _from_migrated_template(db_url)
    db = open_database(db_url)
    _, sandbox = make_local_backend(data_dir)
    sandbox_dir = sandbox_folder() if sandbox.identity == "per-renter uid" else None
    config = SlurmConfig(conf=conf, partition="gpu", spot_partition="spot")
    wait_cluster_idle(config)
    gpus, config.gres_types = discover(SlurmCli(config), {"a100": "A100-80GB"}, simulated=True)
    clock = SystemClock()
    boot = bootstrap(
        db,
        data_dir,
        "CNY",
        gpus,
        clock.now_ms(),
        host_settings={"network_policy": sandbox.network},
        sandbox=sandbox,
        sandbox_dir=sandbox_dir,
    )
    st = Settings(
        data_dir=data_dir,
        sandbox_dir=sandbox_dir,
        sandbox_uid_first=worker_uid_first(),
        sandbox_uid_count=WORKER_UIDS,
        **settings,
    )
    backend = SlurmBackend(data_dir, config, sandboxed=sandbox.sandboxed)
    p = Platform(db=db, clock=clock, backend=backend, settings=st, sandbox=sandbox)
    billing.set_price(p, "A100-80GB", "36.00", interruptible="12.00")  # 1 fen per second on demand
    return p, boot.admin_token or (data_dir / "admin-token").read_text().strip()


@pytest.fixture
def slurm_live(db_url: str, tmp_path: Path, slurm_conf: Path) -> Iterator[LiveServer]:
    p, token = slurm_platform(
        db_url, tmp_path / "data", slurm_conf, tick_interval_s=0.2, meter_interval_s=1.0, preempt_notice_s=5
    )
    with LiveServer(p, token) as srv:
        yield srv
    p.db.engine.dispose()


def job_of(c: httpx.Client, inst_id: str) -> str:
    ref = c.get(f"/instances/{inst_id}").json()["backend_ref"]
    assert ref and ref.startswith("slurm:"), ref
    return str(ref.removeprefix("slurm:"))


def slurm_job(p: Platform, job_id: str) -> JobRecord:
    backend = p.backend
    assert isinstance(backend, SlurmBackend)
    return backend.cli.squeue()[job_id]


def slurm_elapsed(p: Platform, job_id: str) -> int:
    """Slurm's own run time of a job that has ended: not RUNNING, and not COMPLETING either (danlu
    counts a COMPLETING job as running, and under load Slurm can stay there a while)."""
    job = wait_for(lambda: (j := slurm_job(p, job_id)).end_s is not None and j.state not in RUNNING_STATES and j)
    assert isinstance(job, JobRecord) and job.start_s is not None and job.end_s is not None
    return job.end_s - job.start_s


def test_rentals_run_as_slurm_jobs_and_are_billed_slurms_elapsed_seconds(slurm_live: LiveServer) -> None:
    p = slurm_live.platform
    with slurm_live.new_user("sam") as c:
        r = c.post(
            "/instances",
            json={
                "gpu_model": "A100-80GB",
                "gpu_count": 1,
                "command": ["sh", "-c", "echo hello from $DANLU_INSTANCE_ID; sleep 120"],
            },
        )
        assert r.status_code == 201, r.text
        inst = r.json()["id"]
        assert r.json()["status"] == "running"
        job = job_of(c, inst)
        record = slurm_job(p, job)
        assert (record.state, record.name, record.node) == ("RUNNING", f"danlu-{inst}", "dev0")
        wait_for(lambda: f"hello from {inst}" in c.get(f"/instances/{inst}/logs").json()["text"])
        with p.db.read() as s:
            handle = s.get(Instance, inst).run_handle  # type: ignore[union-attr]
        used = wait_for(lambda: p.backend.usage([handle]).get(handle))  # written by the runner on the node
        assert isinstance(used, RunUsage) and used.rss_bytes > 0
        time.sleep(2.5)
        assert c.post(f"/instances/{inst}/stop").status_code == 200
        wait_for(lambda: c.get(f"/instances/{inst}").json()["status"] == "stopped")
        stopped = c.get(f"/instances/{inst}").json()
        elapsed = slurm_elapsed(p, job)
        assert elapsed >= 2
        assert stopped["billed_seconds"] == elapsed  # Slurm's StartTime to its EndTime (the scancel)
        with p.db.read() as s:  # the billed interval is Slurm's, not the moments danlu asked
            alloc = s.scalars(select(AllocationRow).where(AllocationRow.instance_id == inst)).one()
        record = slurm_job(p, job)
        assert record.start_s is not None and record.end_s is not None
        assert alloc.started_at_ms == record.start_s * 1000
        assert alloc.ended_at_ms is not None and alloc.ended_at_ms // 1000 == record.end_s
        assert stopped["cost"] == f"{elapsed / 100:.2f}"  # 1 fen per second

        # A command that ends by itself: billing ends at Slurm's EndTime, with its exit code.
        r = c.post(
            "/instances", json={"gpu_model": "A100-80GB", "gpu_count": 1, "command": ["sh", "-c", "sleep 2; exit 4"]}
        )
        assert r.status_code == 201, r.text
        done_id = r.json()["id"]
        done_job = job_of(c, done_id)
        wait_for(lambda: c.get(f"/instances/{done_id}").json()["status"] == "exited")
        done = c.get(f"/instances/{done_id}").json()
        assert done["exit_code"] == 4
        assert done["billed_seconds"] == slurm_elapsed(p, done_job) >= 2
        assert slurm_job(p, done_job).state == "FAILED"
        balance = c.get("/balance").json()["balance"]
        assert balance == f"{100 - (elapsed + done['billed_seconds']) / 100:.2f}"
    total, _ = billing.ledger_totals(p)
    assert total == 0


def _cluster_state(p: Any) -> dict[str, Any]:
    """Slurm's jobs and the GPU rows, for a failure message."""
    from sqlalchemy import select

    from danlu.db.models import Gpu

    jobs = [(j.name, j.state) for j in p.backend.cli.squeue().values()]
    with p.db.read() as s:
        gpus = [(g.idx, g.allocation_id, g.held_by_cluster) for g in s.scalars(select(Gpu).order_by(Gpu.idx))]
    return {"squeue": jobs, "gpus": gpus}


def test_twenty_concurrent_rentals_for_the_last_free_gpu_get_exactly_one(slurm_live: LiveServer) -> None:
    p = slurm_live.platform
    with slurm_live.new_user("ria") as c:
        for _ in range(3):
            r = c.post("/instances", json={"gpu_model": "A100-80GB", "gpu_count": 1, "command": ["sleep", "300"]})
            assert r.status_code == 201 and r.json()["status"] == "running", r.text
        results: list[tuple[int, str]] = []
        messages: list[str] = []
        barrier = threading.Barrier(20)

        def rent() -> None:
            with slurm_live.client(c.headers["Authorization"].removeprefix("Bearer ")) as mine:
                barrier.wait()
                r = mine.post(
                    "/instances", json={"gpu_model": "A100-80GB", "gpu_count": 1, "command": ["sleep", "300"]}
                )
                results.append(
                    (r.status_code, r.json()["status"] if r.status_code == 201 else r.json()["error"]["code"])
                )
                messages.append(r.text[:300])

        threads = [threading.Thread(target=rent) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # Seen under CI: all 20 answered no_capacity, or two got a GPU (one of the three above had
        # exited, see below). What the cluster and the GPU rows looked like is part of the message.
        if sorted(results) != [(201, "running")] + [(409, "no_capacity")] * 19:
            listing = c.get("/instances").json()
            events = [(i["id"], i["status"], c.get(f"/instances/{i['id']}/events").json()) for i in listing]
            pytest.fail(f"{sorted(results)}\n{sorted(set(messages))}\n{events}\n{_cluster_state(p)}")
        backend = p.backend
        assert isinstance(backend, SlurmBackend)
        listing = c.get("/instances").json()
        ours = {f"danlu-{i['id']}" for i in listing if i["status"] == "running"}
        if len(ours) != 4:
            events = [(i["id"], i["status"], c.get(f"/instances/{i['id']}/events").json()) for i in listing]
            pytest.fail(f"{len(ours)} running\n{events}\n{_cluster_state(p)}")

        def running() -> set[str]:
            return {j.name for j in backend.cli.squeue().values() if j.state == "RUNNING"} & ours

        # A rental of the three above once exited at once (code 1): a concurrent node runner's cgroup
        # sweep had removed its group before it attached (fixed: runners do not sweep). If one is ever
        # missing again, say which, with its events, logs and the cluster's state.
        deadline = time.monotonic() + 15
        while running() != ours and time.monotonic() < deadline:
            time.sleep(0.5)
        if running() != ours:
            states = {j.name: (j.job_id, j.state, j.reason) for j in backend.cli.squeue().values() if j.name in ours}
            detail = [(i["id"], c.get(f"/instances/{i['id']}/events").json()) for i in listing]
            detail += [(i["id"], c.get(f"/instances/{i['id']}/logs").json()) for i in listing]
            missing = sorted(ours - running())
            pytest.fail(f"not RUNNING: {missing}\nsqueue: {states}\nevents: {detail}\n{_cluster_state(p)}")


def test_a_job_preempted_with_notice_resumes_from_its_checkpoint(slurm_live: LiveServer) -> None:
    p = slurm_live.platform
    with slurm_live.new_user("ada") as c:
        r = c.post("/jobs", json={"command": ["sh", "-c", RESUMABLE], "gpus": 4, "interruptible": True})
        assert r.status_code == 201, r.text
        low = r.json()["id"]
        wait_for(lambda: c.get(f"/jobs/{low}").json()["status"] == "running")

        def run_handle() -> str | None:
            with p.db.read() as s:
                return s.scalars(select(Instance.run_handle).where(Instance.job_id == low)).one()

        handle = wait_for(run_handle)  # recorded once Slurm runs it
        assert slurm_job(p, str(json.loads(str(handle))["job"])).partition == "spot"  # interruptible work
        step = p.sandbox_root / "jobs" / low / "checkpoints" / "step"
        wait_for(lambda: step.exists() and int(step.read_text() or 0) >= 3)
        r = c.post("/jobs", json={"command": ["sh", "-c", "echo high ran"], "gpus": 4, "priority": "high"})
        high = r.json()["id"]
        wait_for(lambda: c.get(f"/jobs/{high}").json()["status"] == "succeeded", timeout=60)
        wait_for(lambda: c.get(f"/jobs/{low}").json()["status"] == "succeeded", timeout=60)
        low_view = c.get(f"/jobs/{low}").json()
        assert low_view["preemptions"] == 1 and low_view["attempts"] == 2
        log = c.get(f"/jobs/{low}/logs").json()["text"]
        assert "checkpointed at step" in log and "deadline 20" in log  # SIGTERM reached it, the deadline file too
        resumed = [line for line in log.splitlines() if line.startswith("attempt 2 resumes at step")]
        assert resumed and int(resumed[0].split()[5]) >= 3  # from the checkpoint, not from 0
        assert "high ran" in c.get(f"/jobs/{high}/logs").json()["text"]


def test_a_dead_node_makes_its_run_lost_billed_until_its_last_heartbeat(slurm_live: LiveServer) -> None:
    p = slurm_live.platform
    with slurm_live.new_user("neo") as c:
        r = c.post("/instances", json={"gpu_model": "A100-80GB", "gpu_count": 1, "command": ["sleep", "300"]})
        assert r.status_code == 201, r.text
        inst = r.json()["id"]
        job = job_of(c, inst)
        start = slurm_job(p, job).start_s
        assert start is not None

        def beat_after_five_seconds() -> int | None:
            with p.db.read() as s:
                handle = s.get(Instance, inst).run_handle  # type: ignore[union-attr]
            beat = p.backend.alive_until([handle]).get(handle) if handle else None
            return beat if beat is not None and beat / 1000 - start >= 5 else None

        # The node's runner beats every 5 s: wait for a beat 5 s or more after Slurm's start (the runner's
        # own marker, however late a loaded machine writes it), then kill.
        beat = wait_for(beat_after_five_seconds, timeout=60)
        dev("kill-slurmd")  # slurmd and the job's processes die, as with a node that lost power
        killed = time.time()
        try:
            wait_for(lambda: c.get(f"/instances/{inst}").json()["status"] == "lost", timeout=90)
        finally:
            dev("start-slurmd")
        lost = c.get(f"/instances/{inst}").json()
        assert "NODE_FAIL" in lost["status_reason"] and "last seen alive" in lost["status_reason"]
        record = slurm_job(p, job)
        assert record.state == "NODE_FAIL" and record.end_s is not None
        assert 1 <= lost["billed_seconds"] <= record.end_s - start  # never past Slurm's own end
        # Nor past the run's last heartbeat: Slurm's end comes SlurmdTimeout (here 10 s; 300 s in production)
        # after the node died, and was billed until then (issue 28, finding 8).
        assert lost["billed_seconds"] <= killed - start + 1, (lost, killed - start, record.end_s - start)
        seen = datetime.fromisoformat(lost["status_reason"].rsplit("last seen alive ", 1)[1]).timestamp()
        assert beat // 1000 <= seen <= killed + 1, (lost, beat, killed)  # billed until a beat we saw, or later


def test_a_run_that_ends_while_danlu_is_down_is_billed_exactly(db_url: str, tmp_path: Path, slurm_conf: Path) -> None:
    from danlu.accounts.service import create_user
    from danlu.compute import instances

    p1, _ = slurm_platform(db_url, tmp_path / "data", slurm_conf)
    with p1.db.write() as s:
        user, _ = create_user(s, "rex", 0)
        s.expunge(user)
    billing.admin_topup(p1, "rex", "100.00", "seed")
    inst = instances.rent(p1, user, "A100-80GB", 1, ["sh", "-c", "sleep 3"])
    assert inst.status == "running"
    job = instances.show(p1, user, inst.id).backend_ref
    assert job is not None
    p1.db.engine.dispose()  # the server goes down; the job finishes meanwhile
    elapsed = slurm_elapsed(p1, job.removeprefix("slurm:"))

    db2 = open_database(db_url)  # a new server process: a new backend that knows nothing
    config = p1.backend.config  # type: ignore[attr-defined]
    p2 = Platform(
        db=db2,
        clock=SystemClock(),
        backend=SlurmBackend(p1.settings.data_dir, config, sandboxed=p1.sandbox.sandboxed),
        settings=p1.settings,
        sandbox=p1.sandbox,
    )
    reconcile(p2)
    meter_all(p2)
    view = instances.show(p2, user, inst.id)
    assert (view.status, view.exit_code) == ("exited", 0)
    assert view.billed_seconds == elapsed >= 3
    assert view.cost_minor == elapsed
    total, _ = billing.ledger_totals(p2)
    assert total == 0
    end_runs(p2)
    db2.engine.dispose()


def test_an_unreachable_controller_refuses_new_rentals_and_keeps_running_ones(slurm_live: LiveServer) -> None:
    with slurm_live.new_user("ivy") as c:
        r = c.post("/instances", json={"gpu_model": "A100-80GB", "gpu_count": 1, "command": ["sleep", "300"]})
        assert r.status_code == 201, r.text
        inst = r.json()["id"]
        dev("stop-slurmctld")
        try:
            time.sleep(1.0)  # a few ticks find Slurm silent
            r = c.post("/instances", json={"gpu_model": "A100-80GB", "gpu_count": 1, "command": ["sleep", "300"]})
            assert r.status_code == 503, r.text
            assert r.json()["error"]["code"] == "backend_unavailable"
            assert "does not answer" in r.json()["error"]["message"]
            assert c.get(f"/instances/{inst}").json()["status"] == "running"  # kept, not judged lost
            assert len(c.get("/instances").json()) == 1  # the refused rental left nothing behind
            # A stop cannot reach the job either: refused, so billing never ends while Slurm runs it (finding 8).
            stop = c.post(f"/instances/{inst}/stop")
            assert stop.status_code == 503 and stop.json()["error"]["code"] == "backend_unavailable", stop.text
            assert c.get(f"/instances/{inst}").json()["status"] == "running"
            ready = httpx.get(slurm_live.url + "/readyz", timeout=30)  # a load balancer sees it (issue 28)
            assert ready.status_code == 503 and ready.json()["checks"]["backend"] == {
                "ok": False,
                "detail": "slurm: does not answer",
            }
            assert httpx.get(slurm_live.url + "/healthz", timeout=30).status_code == 200  # alive all the same
            assert 'danlu_backend_up{backend="slurm"} 0.0' in httpx.get(slurm_live.url + "/metrics", timeout=30).text
        finally:
            dev("start-slurmctld")
        wait_for(
            lambda: (
                c.post(
                    "/instances", json={"gpu_model": "A100-80GB", "gpu_count": 1, "command": ["sleep", "300"]}
                ).status_code
                == 201
            ),
            timeout=60,
        )
        assert c.get(f"/instances/{inst}").json()["status"] == "running"
        assert httpx.get(slurm_live.url + "/readyz", timeout=30).status_code == 200


def test_a_server_that_dies_between_submit_and_record_leaves_nothing_running_or_billed(
    db_url: str, tmp_path: Path, slurm_conf: Path
) -> None:
    from danlu.accounts.service import create_user
    from danlu.compute import instances

    p, _ = slurm_platform(db_url, tmp_path / "data", slurm_conf)
    with p.db.write() as s:
        user, _ = create_user(s, "kai", 0)
        s.expunge(user)
    billing.admin_topup(p, "kai", "100.00", "seed")
    backend = p.backend
    assert isinstance(backend, SlurmBackend)
    submitted: list[str] = []
    real_launch = backend.launch

    def launch_then_die(spec: Any) -> str:
        handle = real_launch(spec)
        submitted.append(str(json.loads(handle)["job"]))
        raise KeyboardInterrupt  # the server dies with the job submitted (held) and nothing recorded

    backend.launch = launch_then_die  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        instances.rent(p, user, "A100-80GB", 1, ["sleep", "300"])
    assert slurm_job(p, submitted[0]).state == "PENDING"  # held, never released
    backend.launch = real_launch  # type: ignore[method-assign]
    backend._launching.clear()  # a new server process knows of no launch in progress
    reconcile(p)
    with p.db.read() as s:
        inst = s.scalars(select(Instance)).one()
    assert inst.status == "failed" and "not billed" in inst.status_reason
    assert wait_for(lambda: slurm_job(p, submitted[0]).state == "CANCELLED")
    meter_all(p)
    assert billing.balance(p, user).balance_minor == 100_00
    p.db.engine.dispose()


def test_gpus_the_clusters_own_jobs_hold_are_neither_offered_nor_claimed(slurm_live: LiveServer) -> None:
    p = slurm_live.platform
    backend = p.backend
    assert isinstance(backend, SlurmBackend)
    other = backend.cli.run(
        "sbatch", "--parsable", "--job-name=someone-else", "--gres=gpu:a100:3", "--output=/dev/null", "--wrap=sleep 120"
    ).strip()
    with slurm_live.new_user("oli") as c:
        try:
            a100 = lambda: next(o for o in c.get("/offers").json() if o["gpu_model"] == "A100-80GB")  # noqa: E731
            wait_for(lambda: a100()["free"] == 1)  # the next ticks saw another user's job on 3 of the 4
            assert a100()["total"] == 4
            r = c.post("/instances", json={"gpu_model": "A100-80GB", "gpu_count": 2, "command": ["sleep", "60"]})
            assert r.status_code == 409 and r.json()["error"]["code"] == "no_capacity", (
                r.text
            )  # refused, not a 15 s wait
            r = c.post("/instances", json={"gpu_model": "A100-80GB", "gpu_count": 1, "command": ["sleep", "60"]})
            assert r.status_code == 201 and r.json()["status"] == "running", r.text
        finally:
            backend.cli.run("scancel", other, check=False)
        wait_for(lambda: a100()["free"] == 3)  # gone: offered again (1 is our own rental)


def test_gpus_of_a_drained_node_are_not_offered_until_it_is_resumed(slurm_live: LiveServer) -> None:
    """Issue 28, finding 8: a drained (or down, or silent) node's GPUs were offered, and a rental on
    them failed 15 s later with a misleading reason. A rental running there when it drains runs on."""
    p = slurm_live.platform
    backend = p.backend
    assert isinstance(backend, SlurmBackend)
    node = _only_node(backend)
    with slurm_live.new_user("dru") as c:
        a100 = lambda: next(o for o in c.get("/offers").json() if o["gpu_model"] == "A100-80GB")  # noqa: E731
        r = c.post("/instances", json={"gpu_model": "A100-80GB", "gpu_count": 1, "command": ["sleep", "120"]})
        assert r.status_code == 201 and r.json()["status"] == "running", r.text
        running = r.json()["id"]
        wait_for(lambda: a100()["free"] == 3)
        backend.cli.run("scontrol", "update", f"nodename={node}", "state=drain", "reason=danlu-test")
        try:
            wait_for(lambda: a100()["free"] == 0, timeout=60)  # the next ticks saw the node draining
            assert a100()["total"] == 4
            r = c.post("/instances", json={"gpu_model": "A100-80GB", "gpu_count": 1, "command": ["sleep", "60"]})
            assert r.status_code == 409 and r.json()["error"]["code"] == "no_capacity", r.text  # not a 15 s wait
            assert c.get(f"/instances/{running}").json()["status"] == "running"  # drain lets running jobs end
        finally:
            backend.cli.run("scontrol", "update", f"nodename={node}", "state=resume")
        wait_for(lambda: a100()["free"] == 3, timeout=60)  # resumed: offered again (1 is our own rental)
        assert c.post(f"/instances/{running}/stop").status_code == 200


def _only_node(backend: SlurmBackend) -> str:
    nodes = {line.split("|")[0] for line in backend.cli.run("sinfo", "-h", "-N", "-o", "%N|%T").splitlines()}
    assert len(nodes) == 1, nodes  # the development cluster: one node (tools/slurm-dev.sh)
    return nodes.pop()


def test_sessions_and_ports_reach_a_run_on_its_slurm_node(slurm_live: LiveServer) -> None:
    """Issue 25 on Slurm: exec, a shell with a terminal and a published port reach the run's sandbox on
    its node through ``srun --overlap`` (the node runner's module there), not the server's host."""
    from tests.access.session_client import Session, run
    from tests.access.test_ports import APP
    from tests.access.test_sessions import token_of

    p = slurm_live.platform
    with slurm_live.new_user("sid") as c:
        r = c.post("/instances", json={"gpu_model": "A100-80GB", "command": ["python3", "-c", APP, "8888"]})
        assert r.status_code == 201, r.text
        iid, token = r.json()["id"], token_of(c)
        job = job_of(c, iid)
        listed = lambda: [x["port"] for x in c.get(f"/instances/{iid}/ports").json().get("listening", [])]  # noqa: E731
        wait_for(lambda: listed() == [8888], timeout=60)  # read inside its namespace on the node

        script = "echo in=$SLURM_JOB_ID:$HOME:$(id -u):$(head -c4 /proc/1/cmdline); echo e >&2; exit 7"
        s = run(slurm_live, token, iid, ["sh", "-c", script])
        assert s.status == {"exit_code": 7}
        # Inside the sandbox on the node (the run's environment and PID namespace, the renter's uid),
        # not in Slurm's step (whose environment has SLURM_JOB_ID).
        empty, home, uid, init = s.out.decode().strip().removeprefix("in=").split(":")
        assert (empty, home, init) == ("", "/workspace", "bwra"), s.out
        assert int(uid) >= p.settings.sandbox_uid_first
        assert s.err.decode() == "e\n"  # srun adds nothing of its own

        sh = Session(slurm_live, token, iid, ["/bin/bash", "--norc", "-i"], tty="true", cols=100, rows=40)
        sh.type("echo size=$(stty size) tty=$([ -t 0 ] && echo yes)\r")
        sh.read_until(b"size=40 100 tty=yes")
        sh.resize(132, 50)  # srun passes it on to the node asynchronously: ask until it has landed
        for _ in range(60):
            sh.out.clear()
            sh.type("echo now=$(stty size)-$((1+1))\r")
            sh.read_until(b"-2\r\n", timeout=60)  # the command's output, not the echo of the typed line
            if b"now=50 132-2" in sh.out:
                break
            time.sleep(0.5)
        assert b"now=50 132-2" in sh.out, sh.out
        sh.type("sleep 1313\r")  # Ctrl-C once the sleep itself runs (tests/access/test_sessions.py says why)
        wait_for(lambda: b"sleep\x001313" in _cmdlines(), timeout=120)
        sh.send(b"\x03")
        sh.type("echo after-sleep=$?\r")
        sh.read_until(b"after-sleep=130")
        sh.type("exit 3\r")
        assert sh.finish() == {"exit_code": 3}

        body = httpx.get(f"{slurm_live.url}/p/{iid}/8888/on/slurm", headers={"Authorization": f"Bearer {token}"})
        assert body.status_code == 200, body.text
        assert body.json()["target"] == "/on/slurm"
        closed = httpx.get(f"{slurm_live.url}/p/{iid}/8899/", headers={"Authorization": f"Bearer {token}"})
        assert closed.status_code == 409 and closed.json()["error"]["code"] == "port_closed", closed.text

        # A dropped shell's processes end (its srun step with them); the rental runs on.
        held = Session(slurm_live, token, iid, ["sh", "-c", "echo held; exec sleep 777"])
        held.read_until(b"held")
        held.drop()
        wait_for(lambda: b"sleep\x00777" not in _cmdlines(), timeout=120)
        assert c.get(f"/instances/{iid}").json()["status"] == "running"

        open_one = Session(slurm_live, token, iid, ["sh", "-c", "echo up; exec sleep 3000"])
        open_one.read_until(b"up")
        assert c.post(f"/instances/{iid}/stop").status_code == 200
        status = open_one.finish(timeout=90)
        assert "exit_code" in status and status["exit_code"] != 0  # ended with its sandbox
        wait_for(lambda: c.get(f"/instances/{iid}").json()["status"] == "stopped")
        late = run(slurm_live, token, iid, ["true"])
        assert late.status is not None and late.status["error"]["code"] == "instance_not_running"
        assert slurm_job(p, job).state != "RUNNING"


def _cmdlines() -> bytes:
    out = b""
    for proc in Path("/proc").iterdir():
        try:
            out += (proc / "cmdline").read_bytes() + b"\n"
        except OSError:
            continue
    return out


@pytest.fixture(scope="module")
def two_nodes(slurm_conf: Path) -> Iterator[Path]:
    """`make slurm-dev NODES=2`: dev0 and dev1, a slurmd each, for the module's last tests; then one node
    again (the script restarts the cluster when the node count changes), as the module found it."""
    two = {**os.environ, "DANLU_SLURM_NODES": "2"}
    try:
        done = subprocess.run(["bash", str(SCRIPT), "start"], env=two, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-1500:]
        yield slurm_conf
    finally:
        dev("start")


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_cluster_of_two_nodes_offers_both_and_places_a_rental_on_each(
    db_url: str, tmp_path: Path, two_nodes: Path
) -> None:
    """Issue 28, finding 8: several nodes worked when added by hand, but neither `make slurm-dev` nor
    docs/slurm.md said how. `make slurm-dev NODES=2` (DANLU_SLURM_NODES) starts dev0 and dev1, a slurmd
    each; danlu offers both nodes' GPUs and places two 4-GPU rentals one per node."""
    p, token = slurm_platform(db_url, tmp_path / "data", two_nodes, tick_interval_s=0.2, meter_interval_s=1.0)
    with LiveServer(p, token) as srv, srv.new_user("duo", "500.00") as c:
        [a100] = [o for o in c.get("/offers").json() if o["gpu_model"] == "A100-80GB"]
        assert (a100["total"], a100["free"]) == (8, 8)
        rented = []
        for _ in range(2):
            r = c.post("/instances", json={"gpu_model": "A100-80GB", "gpu_count": 4, "command": ["sleep", "300"]})
            assert r.status_code == 201 and r.json()["status"] == "running", r.text
            rented.append(r.json()["id"])
        assert {slurm_job(p, job_of(c, iid)).node for iid in rented} == {"dev0", "dev1"}
        for iid in rented:
            assert c.post(f"/instances/{iid}/stop").status_code == 200
        for iid in rented:
            wait_for(lambda iid=iid: c.get(f"/instances/{iid}").json()["status"] == "stopped", timeout=60)
    p.db.engine.dispose()


GANG_PROBE = (
    'f="$DANLU_WORKSPACE/rank$NODE_RANK"; '
    'echo "$NODE_RANK $NNODES $WORLD_SIZE $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT $CUDA_VISIBLE_DEVICES" > "$f"; '
    'echo "$PET_NNODES $PET_NODE_RANK $PET_NPROC_PER_NODE $PET_MASTER_ADDR $PET_MASTER_PORT" >> "$f"; '
    'echo "$(id -u) $DANLU_WORKSPACE $DANLU_JOB_ID" >> "$f"; echo "rank $NODE_RANK ran"; '
    'i=0; while [ ! -e "$DANLU_WORKSPACE/go" ] && [ $i -lt 900 ]; do sleep 0.1; i=$((i+1)); done'
)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_gang_of_eight_gpus_runs_over_both_nodes_as_one_slurm_job_billed_per_gpu(
    db_url: str, tmp_path: Path, two_nodes: Path
) -> None:
    """Issue 30, item 1 live: a job for 8 GPUs on nodes of 4 is one Slurm allocation over dev0 and dev1
    (``--nodes 2 --gres gpu:a100:4``), a sandboxed runner on each node; inside each sandbox the rendezvous
    variables a distributed launcher reads (torch's env:// and torchrun's PET_ options) agree on the master
    and differ by rank; a session reaches rank 0's sandbox; billed = Slurm's elapsed seconds × 8 GPUs."""
    from tests.access.session_client import run
    from tests.access.test_sessions import token_of

    p, token = slurm_platform(db_url, tmp_path / "data", two_nodes, tick_interval_s=0.2, meter_interval_s=1.0)
    with LiveServer(p, token) as srv, srv.new_user("gwen", "500.00") as c:
        r = c.post("/jobs", json={"command": ["sh", "-c", GANG_PROBE], "gpus": 8})
        assert r.status_code == 201, r.text
        jid = r.json()["id"]
        workspace = p.sandbox_root / "jobs" / jid / "workspace"
        wait_for(lambda: all((workspace / f"rank{r}").exists() for r in (0, 1)), timeout=90)
        # a session reaches the gang's rank 0 (the node that runs the batch script), in its sandbox
        s = run(srv, token_of(c), jid, ["sh", "-c", "echo rank=$NODE_RANK of=$NNODES; touch go"], kind="jobs")
        assert s.status == {"exit_code": 0} and s.out.decode().strip() == "rank=0 of=2", (s.out, s.err)
        wait_for(lambda: c.get(f"/jobs/{jid}").json()["status"] in ("succeeded", "failed"), timeout=120)
        view = c.get(f"/jobs/{jid}").json()
        assert view["status"] == "succeeded", (view, c.get(f"/jobs/{jid}/logs").json()["text"])
        with p.db.read() as s:
            inst = s.scalars(select(Instance).where(Instance.job_id == jid)).one()
            alloc = s.scalars(select(AllocationRow).where(AllocationRow.instance_id == inst.id)).one()
            uid = s.get(User, inst.user_id).sandbox_uid  # type: ignore[union-attr]
            handle = json.loads(str(inst.run_handle))
        assert handle["nodes"] == ["dev0", "dev1"]
        record = slurm_job(p, str(handle["job"]))
        assert record.node in ("dev[0-1]", "dev0,dev1"), record
        ranks = [(workspace / f"rank{r}").read_text().split("\n") for r in (0, 1)]
        first = [line.split() for line in ranks[0]]
        second = [line.split() for line in ranks[1]]
        master, port = first[0][4], first[0][5]
        assert first[0] == ["0", "2", "8", "4", master, port, "0,1,2,3"]
        assert second[0] == ["1", "2", "8", "4", master, port, "0,1,2,3"]  # the same master, each its own GPUs
        assert int(port) == 20000 + int(handle["job"]) % 10000
        assert first[1] == ["2", "0", "4", master, port] and second[1] == ["2", "1", "4", master, port]
        if p.sandbox.sandboxed:  # inside the sandbox, as the renter's own uid, on both nodes
            expected = [str(uid if p.sandbox.identity == "per-renter uid" else os.getuid()), "/workspace", jid]
            assert first[2] == expected and second[2] == expected
        log = c.get(f"/jobs/{jid}/logs").json()["text"]
        assert "rank 0 ran" in log and "rank 1 ran" in log  # both nodes' output in the job's log
        assert ((alloc.ended_at_ms or 0) - alloc.started_at_ms) // 1000 >= 1
        elapsed = slurm_elapsed(p, str(handle["job"]))
        assert alloc.gpu_count == 8 and alloc.started_at_ms == (record.start_s or 0) * 1000
        assert (alloc.ended_at_ms or 0) // 1000 == slurm_job(p, str(handle["job"])).end_s
        assert ((alloc.ended_at_ms or 0) - alloc.started_at_ms) // 1000 == elapsed  # Slurm's clock, as for one node
        cost = wait_for(lambda: (j := c.get(f"/jobs/{jid}").json())["cost"] != "0.00" and j["cost"])
        assert cost == f"{elapsed * 8 / 100:.2f}"  # 1 fen per GPU-second, 8 GPUs
    total, _ = billing.ledger_totals(p)
    assert total == 0
    p.db.engine.dispose()


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_preempted_gang_checkpoints_on_every_node_and_resumes_as_one(
    db_url: str, tmp_path: Path, two_nodes: Path
) -> None:
    """The notice reaches every node of a gang: an interruptible 8-GPU job over dev0 and dev1 is preempted
    by a high-priority job, checkpoints (SIGTERM on both nodes, not srun cancelling the step), and resumes as
    one gang from its checkpoint once the GPUs are free."""
    p, token = slurm_platform(
        db_url, tmp_path / "data", two_nodes, tick_interval_s=0.2, meter_interval_s=1.0, preempt_notice_s=5
    )
    with LiveServer(p, token) as srv, srv.new_user("hal", "500.00") as c:
        r = c.post("/jobs", json={"command": ["sh", "-c", RESUMABLE], "gpus": 8, "interruptible": True})
        assert r.status_code == 201, r.text
        gang = r.json()["id"]
        step = p.sandbox_root / "jobs" / gang / "checkpoints" / "step"
        wait_for(lambda: step.exists() and int(step.read_text() or 0) >= 3, timeout=60)
        high = c.post("/jobs", json={"command": ["sh", "-c", "echo high ran"], "gpus": 4, "priority": "high"})
        wait_for(lambda: c.get(f"/jobs/{high.json()['id']}").json()["status"] == "succeeded", timeout=90)
        wait_for(lambda: c.get(f"/jobs/{gang}").json()["status"] == "succeeded", timeout=90)
        view = c.get(f"/jobs/{gang}").json()
        assert (view["preemptions"], view["attempts"]) == (1, 2), view
        log = c.get(f"/jobs/{gang}/logs").json()["text"]
        assert log.count("checkpointed at step") == 2  # both nodes had the notice and saved
        resumed = [line for line in log.splitlines() if line.startswith("attempt 2 resumes at step")]
        # both nodes, as one gang, from the checkpoint (the nodes share it; the slower one saved last)
        assert len(resumed) == 2 and all(int(line.split()[5]) >= 1 for line in resumed)
    p.db.engine.dispose()
