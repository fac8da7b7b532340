"""The control loop's phases are one ordered table (issue 27): each tick runs the phases whose cadence
is due, in the table's order, on a fake clock (no sleeping); one phase failing never stops the rest."""

from __future__ import annotations

import dataclasses

import pytest

from danlu.context import Platform
from danlu.core.clock import FakeClock
from danlu.server import loop as loop_mod
from danlu.server.loop import PHASES, Cadence, ControlLoop

EVERY_TICK = ["reconcile", "schedule", "timetables", "idle", "storage", "webhooks"]


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The table with every phase replaced by one that records its name (the work itself is tested where it lives)."""
    seen: list[str] = []

    def recorder(name: str) -> object:
        def run(loop: ControlLoop, tick: loop_mod.Tick) -> None:
            seen.append(name)
            if name == "schedule":
                raise RuntimeError("a failing phase")

        return run

    monkeypatch.setattr(loop_mod, "PHASES", tuple(dataclasses.replace(p, run=recorder(p.name)) for p in PHASES))
    return seen


def test_the_table_says_what_runs_when_and_in_which_order() -> None:
    names = [p.name for p in PHASES]
    assert names.index("reconcile") == 0  # runs end before anything is judged or billed
    assert names.index("schedule") < names.index("idle") < names.index("meter") < names.index("invoices")
    assert {p.cadence for p in PHASES} == set(Cadence)
    assert all(p.what for p in PHASES)
    meter = next(p for p in PHASES if p.name == "meter")
    assert meter.what.startswith("expire due vouchers")  # vouchers expire first, inside the meter pass


def test_each_tick_runs_the_due_phases_in_order_and_a_failure_stops_none(
    platform: Platform, fake_clock: FakeClock, ran: list[str]
) -> None:
    s = platform.settings
    assert (s.tick_interval_s, s.sample_interval_s, s.meter_interval_s) == (1.0, 5.0, 10.0)
    loop = ControlLoop(platform)
    loop.run_once()  # the first tick: everything is due
    assert ran == [p.name for p in PHASES if p.name != "prime"]
    ran.clear()
    fake_clock.advance(seconds=1)
    loop.run_once()
    assert ran == [*EVERY_TICK[:3], "prime", *EVERY_TICK[3:]]
    for _ in range(4):
        ran.clear()
        fake_clock.advance(seconds=1)
        loop.run_once()  # 5 s after the first: a sample, not yet a meter pass
    assert ran == [*EVERY_TICK[:3], "sample", *EVERY_TICK[3:]]
    fake_clock.advance(seconds=5)
    ran.clear()
    loop.run_once()  # 10 s: a meter pass and invoices; alerts wait for their minute
    assert ran == [*EVERY_TICK[:3], "sample", *EVERY_TICK[3:], "meter", "invoices"]
    fake_clock.advance(seconds=50)
    ran.clear()
    loop.run_once()  # a minute on: snapshots, samples fold, hints, and the alerts come with the meter pass
    assert ran == [
        *EVERY_TICK[:3],
        "sample",
        "idle",
        "storage",
        "snapshots",
        "retention",
        "hints",
        "webhooks",
        "meter",
        "invoices",
        "alerts",
    ]
    assert loop.ticks == 8
