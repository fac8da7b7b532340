"""Efficiency hints: the pure rule (low GPU use with a busy process, the evidence, a cheaper GPU
only when it can keep up) and, through the sampler and the loop's phase on a fake clock, one
``efficiency_hint`` event per run and the hints in ``show``."""

from __future__ import annotations

from sqlalchemy import select, update

from danlu.catalog.gpu_models import gpu_models
from danlu.compute import instances
from danlu.context import Platform
from danlu.core.clock import FakeClock
from danlu.db.models import Event, Instance
from danlu.telemetry import efficiency
from danlu.telemetry.hints import Measured, advise
from tests.billing.test_metering import renter
from tests.telemetry.test_sampling import PERIOD_S, Loop, p  # noqa: F401 - the fixture

MODELS = gpu_models()
PRICES = {"A100-80GB": 3600, "L4": 700, "T4": 360}


def measured(util: float, cores: float, mem_mb: int | None = 20_000, samples: int = 100) -> Measured:
    return Measured("A100-80GB", 1, util, cores, 8.0, mem_mb, samples, False)


def test_a_starved_gpu_with_a_busy_process_gets_concrete_fixes_with_the_evidence() -> None:
    hints = advise(measured(30, 1.0), MODELS, PRICES)
    assert hints[0].startswith("input-bound? over the last 10 min the GPU averaged 30% while the process kept 1.0 of 8")
    assert "num_workers=7" in hints[0] and "pin_memory=True" in hints[0]
    assert any(h.startswith("mixed precision") for h in hints)
    assert any("used 19.5 of 80 GB" in h for h in hints)
    # 30% of 312 TFLOPS is 94: an L4 (121, 24 GB ≥ 1.2 × 19.5) keeps up at 19% of the price; a T4 (65) cannot.
    assert hints[-1].startswith("a cheaper GPU: at 30% this A100-80GB delivered about 94 of its 312 dense TFLOPS")
    assert "a L4 (121 TFLOPS, 24 GB)" in hints[-1] and "19% of the price" in hints[-1]


def test_no_hint_when_the_gpu_is_busy_the_process_idle_or_too_little_was_measured() -> None:
    assert advise(measured(85, 1.0), MODELS, PRICES) == []
    assert advise(measured(30, 0.2), MODELS, PRICES) == []  # a paused notebook is the idle stop's business
    assert advise(measured(30, 1.0, samples=3), MODELS, PRICES) == []


def test_no_cheaper_gpu_when_none_keeps_up_or_holds_the_memory() -> None:
    assert not any(h.startswith("a cheaper GPU") for h in advise(measured(55, 1.0), MODELS, PRICES))  # 172 TFLOPS
    big = advise(measured(30, 1.0, mem_mb=40_000), MODELS, PRICES)  # 48 GB needed: no L4
    assert not any(h.startswith("a cheaper GPU") for h in big)
    unmeasured = advise(measured(30, 1.0, mem_mb=None), MODELS, PRICES)  # simulated: never a smaller card
    assert not any(h.startswith("a cheaper GPU") for h in unmeasured)


def test_the_loop_says_it_once_per_run_and_show_lists_it(p: Platform, fake_clock: FakeClock) -> None:  # noqa: F811
    ann = renter(p, "ann", "1000.00")
    busy_one_core = instances.rent(p, ann, "A100-80GB", 1, ["python", "train.py"]).id
    busy_all = instances.rent(p, ann, "A100-80GB", 1, ["python", "train.py"]).id
    with p.db.write() as s:
        s.execute(update(Instance).values(sandbox_json='{"cpus_milli": 4000}'))
    loop = Loop(p, fake_clock)
    for _ in range(600 // PERIOD_S + 1):  # ten minutes: one core of four, and all four
        loop.step({busy_one_core: 1.0 * PERIOD_S, busy_all: 4.0 * PERIOD_S})
    assert efficiency.emit(p) == 1
    assert efficiency.emit(p) == 0  # once per run
    with p.db.read() as s:
        (event,) = s.scalars(select(Event).where(Event.kind == "efficiency_hint"))
    assert event.instance_id == busy_one_core and event.user_id == ann.id
    assert "averaged 25% while the process kept 1.0 of 4 CPU cores busy (simulated GPUs" in event.message
    assert efficiency.hints_for(p, busy_one_core)[0].startswith("input-bound?")
    assert efficiency.hints_for(p, busy_all) == []
