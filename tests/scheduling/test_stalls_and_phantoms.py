"""Issue 11, items 5 and 6: the simulator never stalls silently and never invents a job.

* A job no host can ever hold (a gang wider than any host of its types, or no type it can run on)
  is not queued behind which fifo would block forever: it is reported as unplaceable, and every
  summary says how many jobs did not finish.
* A trace job whose (job type, GPU count) has no measured throughput and no duration is an error
  naming it, not a job that lasts 1 ms on every GPU; ``missing="estimate"`` (the default) makes an explicit, flagged
  estimate from the same job type at another GPU count instead."""

from __future__ import annotations

import pytest

from danlu.billing.pricing import Plan, PriceBook
from danlu.core.errors import InvalidInput
from danlu.scheduling.model import Host, JobRequest
from danlu.scheduling.simulator import SimSetup, simulate, summarize, to_requests
from danlu.scheduling.speed import ThroughputTable
from danlu.scheduling.traces import TraceJob

NOW = 1_767_600_000_000
H = 3_600_000
BOOK = PriceBook("USD", {("V100", Plan.ON_DEMAND): 300, ("K80", Plan.ON_DEMAND): 90})
HOSTS = (Host("v0", "V100", 4, 4), Host("k0", "K80", 4, 4))
TABLE = ThroughputTable({("resnet", 1): {"V100": 10.0, "K80": 2.0}, ("resnet", 4): {"V100": 36.0, "K80": 7.0}})
SETUP = SimSetup(HOSTS, BOOK, NOW, TABLE, "V100")


def test_a_gang_wider_than_any_host_is_reported_and_does_not_block_fifo() -> None:
    wide = JobRequest("wide", "u", 8, NOW, {"V100": H}, seq=0)  # at the head of the queue
    nowhere = JobRequest("nowhere", "u", 1, NOW, {}, seq=1)  # no type it can run on
    small = JobRequest("small", "u", 1, NOW, {"V100": H}, seq=2)
    engine = simulate(SETUP, [wide, nowhere, small], "fifo")
    assert engine.jobs["small"].status == "succeeded"  # fifo went on past the impossible head
    row = summarize(engine, SETUP, "fifo")
    assert (row["jobs"], row["jobs_completed"], row["jobs_unfinished"], row["jobs_unplaceable"]) == (3, 1, 2, 2)
    assert row["unplaceable"] == ["nowhere", "wide"]


def test_a_job_without_throughput_or_duration_is_an_error_not_a_1_ms_phantom() -> None:
    trace = [TraceJob("j0", 0, 1, "resnet", steps=36_000), TraceJob("j1", 0, 2, "resnet", steps=36_000)]
    with pytest.raises(InvalidInput) as err:
        to_requests(SETUP, trace, missing="refuse")
    assert err.value.code == "missing_throughput"
    assert "j1" in err.value.message and "(resnet, 2 GPUs)" in err.value.message
    j0, j1 = to_requests(SETUP, trace)  # the default: estimated, flagged
    assert j0.durations_ms == {"V100": 3_600_000, "K80": 18_000_000} and not j0.estimated
    # From 1 GPU, scaled linearly to 2 (optimistic, and flagged): 36,000 steps at 20/s and 4/s.
    assert j1.durations_ms == {"V100": 1_800_000, "K80": 9_000_000} and j1.estimated
    row = summarize(simulate(SETUP, [j0, j1], "fifo"), SETUP, "fifo")
    assert row["jobs_estimated"] == 1 and min(j1.durations_ms.values()) > 1
