"""Jobs end to end on the live server: real HTTP, real processes, real clock, both databases.

Submit an interruptible job; a high-priority job arrives while every GPU is busy, so the first is
preempted with the guaranteed notice (SIGTERM + DANLU_PREEMPT_DEADLINE), checkpoints, is requeued,
resumes from DANLU_CHECKPOINT_DIR after the high-priority job finishes, and both are billed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from danlu.accounts.service import create_user
from danlu.billing import service as billing
from danlu.compute import instances, snapshots
from danlu.compute.reconcile import reconcile
from danlu.context import Platform
from danlu.core.clock import SystemClock
from danlu.core.errors import Conflict, NotFound
from danlu.db.models import Instance
from danlu.scheduling import jobs
from danlu.scheduling.live import schedule_round
from tests.conftest import LiveServer, make_platform, wait_for
from tests.fakes import RecordingBackend

# Every test that runs it preempts its first attempt, so the first attempt steps on until its notice (at most
# 10 min): a first attempt of 12 steps (3 s) could end before a loaded machine's round preempted it (CI at
# 13483fb: 0 preemptions, the Slurm test's high job ran after the low one had finished). A second attempt
# finishes at step 12.
RESUMABLE = r"""
i=$(cat "$DANLU_CHECKPOINT_DIR/step" 2>/dev/null || echo 0)
echo "attempt $DANLU_ATTEMPT resumes at step $i on $CUDA_VISIBLE_DEVICES"
save() {
  echo "$i" > "$DANLU_CHECKPOINT_DIR/step"
  echo "checkpointed at step $i; deadline $(head -1 "$DANLU_PREEMPT_FILE")"
}
trap 'save; exit 0' TERM
last=12; [ "$DANLU_ATTEMPT" = 1 ] && last=2400
while [ "$i" -lt "$last" ]; do i=$((i+1)); echo "$i" > "$DANLU_CHECKPOINT_DIR/step"; sleep 0.25; done
echo finished
"""


def jobs_platform(db_url: str, tmp_path: Path, **settings: object) -> tuple[Platform, str]:
    """A platform with two simulated T4s and fast loops (a 0.2 s tick, a 3 s notice), as live job tests use."""
    return make_platform(
        db_url,
        tmp_path / "data",
        SystemClock(),
        spec="T4:2",
        stop_grace_s=2,
        tick_interval_s=0.2,
        meter_interval_s=1.0,
        preempt_notice_s=3,
        **settings,
    )


@pytest.fixture
def jobs_live(db_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    p, token = jobs_platform(db_url, tmp_path)
    billing.set_price(p, "T4", "36.00", interruptible="12.00")
    with LiveServer(p, token) as srv:
        yield srv
    p.db.engine.dispose()


def test_preempt_with_notice_then_resume_from_checkpoint(jobs_live: LiveServer) -> None:
    with jobs_live.new_user("ana") as c:
        offer = c.get("/offers").json()[0]
        assert (offer["price_per_hour"], offer["interruptible_price_per_hour"]) == ("36.00", "12.00")
        r = c.post("/jobs", json={"command": ["sh", "-c", RESUMABLE], "gpus": 2, "interruptible": True})
        assert r.status_code == 201, r.text
        low = r.json()["id"]
        wait_for(lambda: c.get(f"/jobs/{low}").json()["status"] == "running")
        wait_for(lambda: "resumes at step 0" in c.get(f"/jobs/{low}/logs").json()["text"])
        wait_for(
            lambda: int((jobs_live.platform.sandbox_root / "jobs" / low / "checkpoints" / "step").read_text() or 0) >= 3
        )

        r = c.post(
            "/jobs",
            json={"command": ["sh", "-c", "echo high ran on $CUDA_VISIBLE_DEVICES"], "gpus": 2, "priority": "high"},
        )
        high = r.json()["id"]
        assert r.json()["status"] == "queued"  # every GPU is busy
        wait_for(lambda: c.get(f"/jobs/{high}").json()["status"] == "succeeded")
        wait_for(lambda: c.get(f"/jobs/{low}").json()["status"] == "succeeded")

        low_view = c.get(f"/jobs/{low}").json()
        assert low_view["preemptions"] == 1 and low_view["attempts"] == 2
        log = c.get(f"/jobs/{low}/logs").json()["text"]
        assert "checkpointed at step" in log and "deadline 20" in log  # the deadline file's ISO time
        resumed = [line for line in log.splitlines() if line.startswith("attempt 2 resumes at step")]
        assert resumed and int(resumed[0].split()[5]) >= 3  # resumed from the checkpoint, not from 0
        assert log.rstrip().endswith("finished")
        states = [e["to_status"] for e in c.get(f"/jobs/{low}/events").json()]
        assert states == ["queued", "running", "stopping", "queued", "running", "succeeded"]
        assert "high ran on 0,1" in c.get(f"/jobs/{high}/logs").json()["text"]

        costs = [float(c.get(f"/jobs/{j}").json()["cost"]) for j in (low, high)]
        assert costs[0] > 0
        wait_for(
            lambda: (
                abs(
                    100.0
                    - float(c.get("/balance").json()["balance"])
                    - sum(float(c.get(f"/jobs/{j}").json()["cost"]) for j in (low, high))
                )
                < 0.005
            )
        )
        assert c.get("/instances").json() == []  # job runs are not interactive instances
    total, _ = billing.ledger_totals(jobs_live.platform)
    assert total == 0


def test_job_input_errors_and_cancel(jobs_live: LiveServer) -> None:
    with jobs_live.new_user("ben") as c, jobs_live.new_user("cat") as other:
        for body, code in [
            ({"command": [], "gpus": 1}, "invalid_command"),
            ({"command": ["true"], "gpus": 0}, "invalid_gpu_count"),
            ({"command": ["true"], "gpus": 3}, "no_matching_gpus"),
            ({"command": ["true"], "gpu_types": ["Z9"]}, "unknown_gpu_model"),
            ({"command": ["true"], "priority": "urgent"}, "invalid_priority"),
            ({"command": ["true"], "deadline": "tomorrow"}, "invalid_deadline"),
            ({"command": ["true"], "deadline": "2020-01-01T00:00:00+00:00"}, "invalid_deadline"),
            ({"command": ["true"], "max_price": "-1"}, "invalid_amount"),
        ]:
            r = c.post("/jobs", json=body)
            assert r.status_code == 422 and r.json()["error"]["code"] == code, (body, r.text)
        assert c.get("/jobs").json() == []
        jid = c.post("/jobs", json={"command": ["sleep", "60"], "gpus": 2}).json()["id"]
        wait_for(lambda: c.get(f"/jobs/{jid}").json()["status"] == "running")
        assert other.get(f"/jobs/{jid}").status_code == 404
        assert other.post(f"/jobs/{jid}/cancel").status_code == 404
        assert c.post(f"/jobs/{jid}/cancel").status_code == 200
        wait_for(lambda: c.get(f"/jobs/{jid}").json()["status"] == "cancelled")
        assert c.post(f"/jobs/{jid}/cancel").json()["error"]["code"] == "job_finished"
        with jobs_live.admin() as a:
            assert a.get("/offers").json()[0]["free"] == 2


def test_a_run_lost_with_its_node_is_retried_then_given_up(platform: Platform) -> None:
    """Retries on node loss: a run whose process vanishes (no exit status) is requeued from its
    checkpoint, up to job_max_attempts runs in all; then the job fails. Fake backend, both DBs."""
    p = platform
    p.backend = executor = RecordingBackend()
    billing.set_price(p, "T4", "3.60")
    with p.db.write() as s:
        user, _ = create_user(s, "lou", 0)
        s.expunge(user)
    billing.admin_topup(p, "lou", "10.00", "seed")
    job = jobs.submit(p, user, ["train"], gpus=1, gpu_types=["T4"])
    for attempt in range(1, p.settings.job_max_attempts + 1):
        assert schedule_round(p).started == [job.id]
        view = jobs.show(p, user, job.id)
        assert (view.status, view.attempts) == ("running", attempt)
        spec = executor.launched[-1]
        assert spec.env["DANLU_ATTEMPT"] == str(attempt) and spec.checkpoints is not None
        assert spec.checkpoints.name == "checkpoints" and spec.log_key == job.id
        executor.die(executor.last())  # the node vanished: no exit status
        reconcile(p)
        assert jobs.settle_runs(p) == 1  # the job layer sees its run end
        view = jobs.show(p, user, job.id)
        expected = "queued" if attempt < p.settings.job_max_attempts else "failed"
        assert view.status == expected, view.status_reason
    assert "giving up" in jobs.show(p, user, job.id).status_reason
    assert schedule_round(p).started == []


def test_a_pipeline_runs_each_job_after_the_one_before_it_succeeded(platform: Platform) -> None:
    """Issue 26, item 6: ``danlu run --after JOB``. A job waits while the job it runs after has not succeeded,
    even with GPUs free; starts once it has; is cancelled unrun (nothing billed) when it failed, and so in turn
    are the jobs after it. Fake backend, both databases."""
    p = platform
    p.backend = executor = RecordingBackend()
    billing.set_price(p, "T4", "3.60")
    with p.db.write() as s:
        user, _ = create_user(s, "pia", 0)
        stranger, _ = create_user(s, "sid", 0)
        s.expunge_all()
    billing.admin_topup(p, "pia", "10.00", "seed")
    prep = jobs.submit(p, user, ["prep"], gpu_types=["T4"])
    train = jobs.submit(p, user, ["train"], gpu_types=["T4"], after=prep.id)
    evaluate = jobs.submit(p, user, ["eval"], gpu_types=["T4"], after=train.id)
    assert schedule_round(p).started == [prep.id]  # a T4 is free, but train waits for prep
    assert jobs.show(p, user, train.id).waiting_for == prep.id
    executor.die(executor.last(), code=0, at_ms=p.clock.now_ms())
    reconcile(p)
    assert schedule_round(p).started == [train.id]  # the round settles prep (succeeded), then starts train
    assert jobs.show(p, user, prep.id).status == "succeeded"
    assert jobs.show(p, user, train.id).waiting_for is None
    executor.die(executor.last(), code=1, at_ms=p.clock.now_ms())
    reconcile(p)
    assert schedule_round(p).started == []
    assert jobs.show(p, user, train.id).status == "failed"
    cancelled = jobs.show(p, user, evaluate.id)
    assert cancelled.status == "cancelled" and cancelled.attempts == 0 and cancelled.cost_minor == 0
    assert cancelled.status_reason == f"not run: the job it runs after ({train.id}) failed"
    with pytest.raises(Conflict) as refused:
        jobs.submit(p, user, ["again"], gpu_types=["T4"], after=train.id)
    assert refused.value.code == "dependency_failed"
    with pytest.raises(NotFound):  # another renter's job is not there
        jobs.submit(p, stranger, ["x"], gpu_types=["T4"], after=prep.id)


def test_live_demotion_by_attained_service_resumes_from_the_checkpoint(
    jobs_live: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The live round demotes like the simulator (issue 11, item 3): a long job that has
    checkpointed and had its share is stopped with notice for a short job of equal priority, then
    resumes. The line and the slice are shrunk from 8 GPU-hours and 1 h to fit a test, as an operator
    would with `--demote-after 1s --demote-slice 1s`."""
    monkeypatch.setattr(jobs_live.platform.settings, "demote_after_s", 1)
    monkeypatch.setattr(jobs_live.platform.settings, "demote_slice_s", 1)
    with jobs_live.new_user("dee") as c:
        # est. 2 h: the short job would wait far longer than its own 5 s without demotion
        r = c.post("/jobs", json={"command": ["sh", "-c", RESUMABLE], "gpus": 2, "est_duration_s": 7200})
        assert r.status_code == 201, r.text
        long_job = r.json()["id"]
        wait_for(lambda: c.get(f"/jobs/{long_job}").json()["status"] == "running")
        wait_for(lambda: "resumes at step 0" in c.get(f"/jobs/{long_job}/logs").json()["text"])
        wait_for(
            lambda: (
                int((jobs_live.platform.sandbox_root / "jobs" / long_job / "checkpoints" / "step").read_text() or 0)
                >= 3
            )
        )
        r = c.post("/jobs", json={"command": ["sh", "-c", "echo short ran"], "gpus": 2, "est_duration_s": 5})
        short = r.json()["id"]
        wait_for(lambda: c.get(f"/jobs/{short}").json()["status"] == "succeeded")
        wait_for(lambda: c.get(f"/jobs/{long_job}").json()["status"] == "succeeded")
        view = c.get(f"/jobs/{long_job}").json()
        assert view["preemptions"] == 1 and view["attempts"] == 2
        events = c.get(f"/jobs/{long_job}/events").json()
        assert [e["to_status"] for e in events] == ["queued", "running", "stopping", "queued", "running", "succeeded"]
        assert any("demoted with notice" in e["reason"] for e in events if e["to_status"] == "stopping")
        log = c.get(f"/jobs/{long_job}/logs").json()["text"]
        resumed = [line for line in log.splitlines() if line.startswith("attempt 2 resumes at step")]
        assert resumed and int(resumed[0].split()[5]) >= 3


def test_a_job_in_a_rentals_workspace_runs_there_one_writer_at_a_time(platform: Platform) -> None:
    """Issue 26, item 6: ``danlu run --workspace ID``. The job's runs use the rental's own workspace in place
    (not a copy): it waits while the rental runs; while it runs, the rental cannot start, be removed, copied
    or snapshotted; a second job in the same workspace waits for the first; another renter's rental is not
    there. Fake backend, both databases."""
    p = platform
    p.backend = executor = RecordingBackend()
    billing.set_price(p, "T4", "3.60")
    with p.db.write() as s:
        user, _ = create_user(s, "wes", 0)
        stranger, _ = create_user(s, "xan", 0)
        s.expunge_all()
    billing.admin_topup(p, "wes", "10.00", "seed")
    billing.admin_topup(p, "xan", "10.00", "seed")
    rental = instances.rent(p, user, "T4", 1, ["notebook"])
    rental_handle = executor.last()
    prep = jobs.submit(p, user, ["prep"], gpu_types=["T4"], workspace_of=rental.id)
    train = jobs.submit(p, user, ["train"], gpu_types=["T4"], workspace_of=rental.id, after=prep.id)
    assert schedule_round(p).started == []  # a T4 is free, but the rental runs in that workspace
    assert jobs.show(p, user, prep.id).workspace_busy and jobs.show(p, user, prep.id).workspace_of == rental.id
    instances.stop(p, user, rental.id)
    executor.die(rental_handle, code=0, at_ms=p.clock.now_ms())
    reconcile(p)
    assert schedule_round(p).started == [prep.id]
    spec = executor.launched[-1]
    with p.db.read() as s:
        workspace = s.get(Instance, rental.id).workspace  # type: ignore[union-attr]
    assert str(spec.workspace) == workspace  # in place: the rental's own folder
    assert spec.checkpoints == jobs.job_dir(p, prep.id) / "checkpoints"  # the job's own
    for attempt in (
        lambda: instances.start(p, user, rental.id),
        lambda: instances.destroy(p, user, rental.id),
        lambda: snapshots.create(p, user, rental.id),
    ):
        with pytest.raises(Conflict) as refused:
            attempt()
        said = refused.value.message  # the job in it now (removal: any job that will still use it)
        assert refused.value.code == "workspace_in_use" and (prep.id in said or train.id in said), said
    with pytest.raises(NotFound):  # another renter's rental is not there
        jobs.submit(p, stranger, ["x"], gpu_types=["T4"], workspace_of=rental.id)
    executor.die(executor.last(), code=0, at_ms=p.clock.now_ms())
    reconcile(p)
    assert schedule_round(p).started == [train.id]  # prep succeeded; train in the same workspace
    assert str(executor.launched[-1].workspace) == workspace
    executor.die(executor.last(), code=0, at_ms=p.clock.now_ms())
    reconcile(p)
    schedule_round(p)
    assert jobs.show(p, user, train.id).status == "succeeded"
    with pytest.raises(NotFound):  # not another renter's to remove
        instances.destroy(p, stranger, rental.id)
    assert instances.start(p, user, rental.id).status == "running"  # both jobs ended: the rental's again
