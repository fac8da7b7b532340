"""Issue 30, item 2, live: an elastic job (``danlu run --gpus 1-2``) on the real server, real sandboxes, real
clock, both databases. It starts on the one GPU free, grows onto the second when that frees (with notice: it
checkpoints and resumes on both), gives one back so a shorter job can start, and is billed for exactly the
GPUs each of its runs held; a resize is not counted as a preemption."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from danlu.billing import service as billing
from danlu.db.models import AllocationRow, Instance
from tests.conftest import LiveServer, wait_for
from tests.scheduling.test_live_jobs import jobs_platform

# Steps until its notice, saving its step; records the GPUs each attempt got. Its fourth attempt finishes.
ELASTIC = r"""
i=$(cat "$DANLU_CHECKPOINT_DIR/step" 2>/dev/null || echo 0)
echo "attempt $DANLU_ATTEMPT on $DANLU_GPUS GPUs ($CUDA_VISIBLE_DEVICES) resumes at step $i"
trap 'echo "$i" > "$DANLU_CHECKPOINT_DIR/step"; echo "checkpointed at step $i"; exit 0' TERM
last=2400; [ "$DANLU_ATTEMPT" -ge 4 ] && last=$((i+2))
while [ "$i" -lt "$last" ]; do i=$((i+1)); echo "$i" > "$DANLU_CHECKPOINT_DIR/step"; sleep 0.25; done
echo finished
"""


@pytest.fixture
def elastic_live(db_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    p, token = jobs_platform(db_url, tmp_path, resize_cooldown_s=1)
    billing.set_price(p, "T4", "36.00")
    with LiveServer(p, token) as srv:
        yield srv
    p.db.engine.dispose()


def test_an_elastic_job_grows_shrinks_and_is_billed_for_what_it_held(elastic_live: LiveServer) -> None:
    with elastic_live.new_user("eli") as c:
        r = c.post("/jobs", json={"command": ["sleep", "600"], "gpus": 1, "est_duration_s": 600})
        blocker = r.json()["id"]
        wait_for(lambda: c.get(f"/jobs/{blocker}").json()["status"] == "running")
        body = {"command": ["sh", "-c", ELASTIC], "gpus": 1, "gpus_max": 2, "est_duration_s": 36_000}
        r = c.post("/jobs", json=body)
        assert r.status_code == 201, r.text
        job = r.json()["id"]
        assert (r.json()["gpus"], r.json()["gpus_max"]) == (1, 2)

        def log() -> str:
            return str(c.get(f"/jobs/{job}/logs").json()["text"])

        wait_for(lambda: "attempt 1 on 1 GPUs" in log())  # the one GPU free
        assert c.get(f"/jobs/{job}").json()["gpus_now"] == 1
        c.post(f"/jobs/{blocker}/cancel")  # a GPU frees: the elastic job grows onto it, with notice
        wait_for(lambda: "attempt 2 on 2 GPUs (0,1)" in log(), timeout=60)
        grown = c.get(f"/jobs/{job}").json()
        assert grown["gpus_now"] == 2 and grown["preemptions"] == 0

        r = c.post("/jobs", json={"command": ["sh", "-c", "echo short ran"], "gpus": 1, "est_duration_s": 60})
        short = r.json()["id"]  # shorter than what the elastic job has left: it gets a GPU back
        wait_for(lambda: c.get(f"/jobs/{short}").json()["status"] == "succeeded", timeout=60)
        wait_for(lambda: "attempt 3 on 1 GPUs" in log(), timeout=60)
        wait_for(lambda: "attempt 4 on 2 GPUs" in log(), timeout=60)  # and grows again once it is gone
        wait_for(lambda: c.get(f"/jobs/{job}").json()["status"] == "succeeded", timeout=60)

        text = log()
        steps = [int(line.split()[-1]) for line in text.splitlines() if " resumes at step " in line]
        assert steps[0] == 0 and steps == sorted(steps) and steps[-1] > 0  # each resize resumed, never from 0
        assert text.count("checkpointed at step") == 3
        view = c.get(f"/jobs/{job}").json()
        assert view["preemptions"] == 0 and view["attempts"] == 4
        reasons = [e["reason"] for e in c.get(f"/jobs/{job}/events").json() if e["to_status"] == "stopping"]
        assert reasons[0].startswith("resizing: growing from 1 to 2 GPUs on idle GPUs")
        assert reasons[1].startswith(f"resizing: shrinking from 2 to 1 GPUs so that job {short} can start")

    p = elastic_live.platform

    def runs() -> list[tuple[str, int, int, int, int, bool]]:
        """(run, its GPUs, GPUs of one of its allocations, billed fen, billed ms, settled), by start."""
        with p.db.read() as s:
            rows = s.execute(
                select(
                    Instance.id,
                    Instance.gpu_count,
                    AllocationRow.gpu_count,
                    AllocationRow.billed_minor,
                    AllocationRow.billed_until_ms - AllocationRow.started_at_ms,
                    AllocationRow.settled,
                )
                .join(AllocationRow, AllocationRow.instance_id == Instance.id)
                .where(Instance.job_id == job)
                .order_by(AllocationRow.started_at_ms, AllocationRow.id)
            ).all()
        return [(str(i), int(a), int(b), int(c), int(d), bool(e)) for i, a, b, c, d, e in rows]

    wait_for(lambda: all(settled for *_, settled in runs()))
    # a run's notice period is an allocation of its own (billed at the interruptible price where one is set)
    shapes = {run: n for run, n, *_ in runs()}
    assert list(shapes.values()) == [1, 2, 1, 2]
    # 36.00 CNY per GPU-hour is 1 fen per GPU-second: each allocation billed its GPUs x its whole billed seconds
    for _, n, held, billed_minor, billed_ms, _ in runs():
        assert held == n and billed_minor == held * (billed_ms // 1000)
    assert billing.ledger_totals(p)[0] == 0


def test_an_elastic_range_is_checked_and_the_cli_reads_it(elastic_live: LiveServer) -> None:
    import typer

    from danlu.cli.job_cmds import _gpu_range

    with elastic_live.new_user("eve") as c:
        for body in ({"gpus": 2, "gpus_max": 2}, {"gpus": 2, "gpus_max": 1}, {"gpus": 1, "gpus_max": 2000}):
            r = c.post("/jobs", json={"command": ["true"], **body})
            assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_gpu_count", (body, r.text)
        assert c.get("/jobs").json() == []  # nothing queued
    assert _gpu_range("2-8") == (2, 8) and _gpu_range(" 4 ") == (4, None)
    for text in ("2-", "-8", "two", "2-8-9", "2.5"):
        with pytest.raises(typer.Exit):
            _gpu_range(text)
