"""A restarted `danlu server` judges the runs it inherited before it answers a request (the kill drill in CI:
a server killed between recording a run and letting its command go left it held back; the renter removed it
before the new server's first tick and was billed 5 s for a command that never ran)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from danlu.accounts.service import create_user
from danlu.billing import service as billing
from danlu.compute import instances
from danlu.compute.backends.local import LocalBackend
from danlu.context import Platform
from danlu.core.clock import FakeClock
from danlu.db.models import AllocationRow, Instance
from danlu.server.loop import ControlLoop
from tests.conftest import end_runs, make_local_backend, make_platform, require_sandbox


@pytest.mark.parametrize("first_tick", [True, False])
def test_a_run_held_back_by_a_killed_server_is_judged_before_a_renter_removes_it(
    db_url: str, tmp_path: Path, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch, first_tick: bool
) -> None:
    require_sandbox()
    data = tmp_path / "data"
    p, _ = make_platform(db_url, data, fake_clock)
    billing.set_price(p, "T4", "36.00")  # 1 fen a second
    with p.db.write() as s:
        user, _ = create_user(s, "rui", 0)
        s.expunge(user)
    billing.admin_topup(p, "rui", "100.00", "seed")
    with monkeypatch.context() as m:
        m.setattr(LocalBackend, "start", lambda self, handle: None)  # killed after the record, before the go
        rented = instances.rent(p, user, "T4", 1, ["sh", "-c", "touch /workspace/ran; exec sleep 600"])
    assert rented.status == "running"
    fake_clock.advance(seconds=5)  # the new server comes up
    backend, _ = make_local_backend(data)
    restarted = Platform(db=p.db, clock=p.clock, backend=backend, settings=p.settings, sandbox=p.sandbox)
    loop = ControlLoop(restarted)
    try:
        if first_tick:
            monkeypatch.setattr(ControlLoop, "_run", lambda self: None)  # its thread ticks nothing here
            loop.start(first_tick=True)  # as `danlu server` does before it answers
            loop.stop()
        # else: the request comes before the loop's first tick (the window the drill found)
        instances.destroy(restarted, user, rented.id)
    finally:
        loop.stop()
        end_runs(restarted)
    with p.db.read() as s:
        billed = s.scalars(select(AllocationRow.billed_minor).where(AllocationRow.instance_id == rented.id)).all()
        reason = s.scalars(select(Instance.status_reason).where(Instance.id == rented.id)).one()
    if first_tick:
        assert billed == [0], billed  # judged never started by the first tick: failed, nothing billed
    else:
        assert billed == [5], billed  # what the drill found: 5 s of a command that never ran
    assert not (data / "workspaces" / rented.id / "ran").exists()  # the command never ran either way
    assert reason
