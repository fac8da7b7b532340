"""Gangs across hosts by default, at measured spread speeds, and traces that are not refused (issue 30).

Before: a gang had to fit on one host unless ``--spread`` was given, a spread gang ran a flat 1.25x
slower although the shared throughput table measures every multi-GPU job spread over servers
(Gavel's "unconsolidated" columns: an 8-GPU LM on V100s runs 9.4x slower spread, a ResNet-18 on
K80s runs faster), fifo never spread, a trace with one unmeasured job was refused, and Shockwave's
12-column traces were ``bad_trace``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from danlu.billing.pricing import Plan, PriceBook
from danlu.core.clock import FakeClock
from danlu.core.errors import InvalidInput
from danlu.scheduling.core import schedule
from danlu.scheduling.engine import Engine
from danlu.scheduling.model import ClusterView, Host, JobRequest, Start
from danlu.scheduling.policies import get_policy
from danlu.scheduling.simulator import SimExecutor, SimSetup, simulate, summarize, to_requests
from danlu.scheduling.speed import ThroughputTable, load_throughputs
from danlu.scheduling.traces import TraceJob, read_trace

H = 3_600_000
PRICES = PriceBook("USD", {(m, p): 100 for m in ("V100", "K80") for p in Plan})
HOSTS = (Host("v0", "V100", 4, 4), Host("v1", "V100", 4, 4))
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "gavel" / "simulation_throughputs_isolated.csv"
DEMO = Path(__file__).resolve().parents[2] / "src" / "danlu" / "scheduling" / "demo" / "throughputs.csv"


def _table() -> Path:
    return SHARED if SHARED.exists() else DEMO


def test_the_table_s_measured_spread_throughputs_are_read() -> None:
    table = load_throughputs(_table())
    one_host = table.lookup("LM (batch size 20)", 4)
    spread = table.lookup_spread("LM (batch size 20)", 4)
    assert one_host is not None and set(spread) == {"K80", "P100", "V100"}
    assert one_host["V100"] / spread["V100"] > 2  # gradients over the network: measured, not 1.25
    assert table.lookup_spread("LM (batch size 20)", 1) == {}  # one GPU is never spread


def test_a_spread_start_takes_the_measured_spread_time_and_the_engine_runs_it() -> None:
    job = JobRequest("wide", "u", 8, 0, {"V100": 10 * H}, seq=1, spread_ok=True, spread_durations_ms={"V100": 30 * H})
    view = ClusterView(H, HOSTS, (job,), (), PRICES, spread_slowdown=1.25)
    [start] = [d for d in schedule(view, get_policy("danlu")) if isinstance(d, Start)]
    assert sorted(start.parts) == [("v0", 4), ("v1", 4)] and start.est_end_ms == H + 30 * H

    clock = FakeClock(0)
    engine = Engine(clock, SimExecutor({"wide": job.durations_ms}, 0), HOSTS, PRICES, get_policy("danlu"))
    engine.submit(job)
    engine.tick()
    assert engine.running["wide"].parts
    clock.set(30 * H - 1)
    engine.tick()
    assert engine.jobs["wide"].status == "running"  # not done at the flat 1.25x (12.5 h)
    clock.set(30 * H)
    engine.tick()
    assert engine.jobs["wide"].end_ms == 30 * H


def test_a_preempted_spread_job_keeps_its_measured_spread_time_for_what_is_left() -> None:
    job = JobRequest(
        "wide",
        "u",
        8,
        0,
        {"V100": 10 * H},
        seq=1,
        spread_ok=True,
        spread_durations_ms={"V100": 20 * H},
        interruptible=True,
    )
    clock = FakeClock(0)
    engine = Engine(clock, SimExecutor({"wide": job.durations_ms}, 0), HOSTS, PRICES, get_policy("danlu"), notice_ms=0)
    engine.restart_overhead_ms = 0
    engine.submit(job)
    engine.tick()
    clock.set(5 * H)  # a quarter of the spread run
    engine.executor.stop("wide", 5 * H)
    engine._ended("wide", 5 * H, "stopped")
    queued = engine._queue["wide"]
    assert queued.durations_ms == {"V100": round(7.5 * H)} and queued.spread_durations_ms == {"V100": 15 * H}


def test_fifo_spreads_a_gang_no_single_host_can_hold() -> None:
    setup = SimSetup(HOSTS, PRICES, 0, ThroughputTable(), "V100", spread_slowdown=2.0)
    wide = JobRequest("wide", "u", 8, 0, {"V100": H}, seq=0, spread_ok=True)
    engine = simulate(setup, [wide], "fifo")
    assert summarize(engine, setup, "fifo")["jobs_completed"] == 1
    assert engine.jobs["wide"].end_ms == 2 * H  # the scenario's declared slowdown: no measured figure


def test_spreading_is_the_default_and_one_host_is_a_choice() -> None:
    setup = SimSetup(HOSTS, PRICES, 0, load_throughputs(_table()), "V100")
    trace = [TraceJob("lm", 0, 8, "LM (batch size 20)", steps=10_000)]
    [default] = to_requests(setup, trace)
    assert default.spread_ok and default.spread_durations_ms["V100"] > default.durations_ms["V100"]
    [one_host] = to_requests(setup, trace, spread=False)
    assert not one_host.spread_ok
    assert summarize(simulate(setup, [default], "danlu"), setup, "danlu")["jobs_completed"] == 1
    assert summarize(simulate(setup, [one_host], "danlu"), setup, "danlu")["jobs_unplaceable"] == 1


def test_a_trace_with_unmeasured_jobs_is_estimated_by_default_skipped_or_refused_on_request() -> None:
    table = ThroughputTable({("resnet", 1): {"V100": 20.0}})
    setup = SimSetup(HOSTS, PRICES, 0, table, "V100")
    trace = [
        TraceJob("j0", 0, 1, "resnet", steps=36_000),
        TraceJob("j1", 0, 2, "resnet", steps=36_000),  # no row for 2 GPUs: scaled from 1
        TraceJob("j2", 0, 1, "unknown-net", steps=36_000),  # a type the table does not know
    ]
    estimated = to_requests(setup, trace)
    assert [(r.id, r.estimated) for r in estimated] == [("j0", False), ("j1", True)]
    assert [r.id for r in to_requests(setup, trace, missing="skip")] == ["j0"]
    with pytest.raises(InvalidInput) as err:
        to_requests(setup, trace, missing="refuse")
    assert err.value.code == "missing_throughput" and "--missing" in err.value.message


SHOCKWAVE_LINES = [
    # job_type, command, working_dir, num_steps_arg, needs_data_dir, total_steps, scale_factor, mode,
    # priority_weight, SLO, duration, arrival_time
    "LM (batch size 20)\tpython3 main.py\tlanguage_modeling\t--steps\t1\t5000\t4\tgns\t1.0\t-1\t1200.5\t0",
    "ResNet-18 (batch size 64)\tpython3 main.py\tcifar10\t--num_steps\t1\t3000\t1\tstatic\t5.0\t2.0\t600\t30.5",
]


def test_shockwave_s_12_column_dynamic_batch_trace_is_read(tmp_path: Path) -> None:
    path = tmp_path / "dynamic.trace"
    path.write_text("\n".join(SHOCKWAVE_LINES) + "\n", encoding="utf-8")
    lm, resnet = read_trace(path)
    assert (lm.job_type, lm.gpus, lm.steps, lm.batch_mode, lm.duration_s, lm.deadline_s) == (
        "LM (batch size 20)",
        4,
        5000.0,
        "gns",
        1200.5,
        None,
    )
    assert (resnet.arrival_s, resnet.batch_mode, resnet.priority) == (30.5, "static", 2)
    assert resnet.deadline_s == 30.5 + 2.0 * 600  # Shockwave's SLO: a multiple of the duration


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("LM\tc\tw\t--s\t1\t5000\t4\telastic\t1\t-1\t100\t0", "batch-size mode 'elastic'"),
        ("LM\tc\tw\t--s\t1\t5000\t4\tstatic\t1\t-1\tlong\t0", "could not convert"),
        ("LM\tc\tw\t--s\t1\t5000\t4\tstatic\t1", "expected 10 tab-separated columns (Gavel) or 11/12"),
    ],
)
def test_a_bad_shockwave_line_is_a_clear_error(tmp_path: Path, line: str, says: str) -> None:
    path = tmp_path / "bad.trace"
    path.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(InvalidInput) as err:
        read_trace(path)
    assert err.value.code == "bad_trace" and says in err.value.message and ":1:" in err.value.message
