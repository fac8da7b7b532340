"""Per-user GPU quotas across rentals and jobs, and fair-share usage fed to the live round."""

from __future__ import annotations

import pytest

from danlu.accounts.service import create_user, set_gpu_quota
from danlu.billing import service as billing
from danlu.compute import instances
from danlu.context import Platform
from danlu.core.clock import FakeClock
from danlu.core.errors import QuotaExceeded
from danlu.db.models import User
from danlu.scheduling import jobs
from danlu.scheduling.live import _usage, schedule_round
from tests.fakes import RecordingBackend


@pytest.fixture
def p(platform: Platform) -> Platform:
    platform.backend = RecordingBackend()
    billing.set_price(platform, "T4", "3.60")
    billing.set_price(platform, "A100-80GB", "36.00")
    return platform


def renter(p: Platform, name: str, quota: int | None) -> User:
    with p.db.write() as s:
        user, _ = create_user(s, name, 0)
        set_gpu_quota(s, name, quota)
        s.expunge(user)
    billing.admin_topup(p, name, "100.00", f"seed-{name}")
    return user


def test_rentals_and_jobs_share_one_gpu_quota(p: Platform) -> None:
    user = renter(p, "qui", 2)
    rental = instances.rent(p, user, "T4", 1, ["x"])
    with pytest.raises(QuotaExceeded) as err:
        instances.rent(p, user, "A100-80GB", 2, ["y"])
    assert err.value.code == "gpu_quota_exceeded" and "quota is 2" in err.value.message
    with pytest.raises(QuotaExceeded):
        jobs.submit(p, user, ["train"], gpus=3)
    job = jobs.submit(p, user, ["train"], gpus=2, gpu_types=["A100-80GB"])
    assert schedule_round(p).started == []  # 1 rented + 2 would exceed the quota of 2
    assert "quota" in jobs.show(p, user, job.id).status_reason
    instances.destroy(p, user, rental.id)
    assert schedule_round(p).started == [job.id]
    with pytest.raises(QuotaExceeded):
        instances.rent(p, user, "T4", 1, ["z"])  # the job's 2 GPUs count too


def test_no_quota_means_no_limit(p: Platform) -> None:
    user = renter(p, "una", None)
    for _ in range(2):
        instances.rent(p, user, "T4", 1, ["x"])
    instances.rent(p, user, "A100-80GB", 2, ["y"])


def test_fair_share_usage_decays_and_covers_rentals_and_jobs(p: Platform, fake_clock: FakeClock) -> None:
    heavy = renter(p, "heavy", None)
    light = renter(p, "light", None)
    inst = instances.rent(p, heavy, "A100-80GB", 2, ["x"])
    fake_clock.advance(seconds=3600)
    instances.destroy(p, heavy, inst.id)
    with p.db.read() as s:
        usage = _usage(s, fake_clock.now_ms())
    assert usage[str(heavy.id)] == pytest.approx(2.0, rel=0.01)  # 2 GPU-hours, barely decayed
    assert str(light.id) not in usage
    fake_clock.advance(seconds=7 * 24 * 3600)  # one half-life later
    with p.db.read() as s:
        assert _usage(s, fake_clock.now_ms())[str(heavy.id)] == pytest.approx(1.0, rel=0.01)


def test_interruptible_rentals_are_preempted_with_notice_on_demand_ones_never(
    p: Platform, fake_clock: FakeClock
) -> None:
    from danlu.compute.reconcile import reconcile
    from danlu.compute.views import show

    billing.set_price(p, "T4", "3.60", interruptible="1.20")
    user = renter(p, "ivy", None)
    spot = instances.rent(p, user, "T4", 2, ["notebook"], interruptible=True)
    steady = instances.rent(p, user, "A100-80GB", 2, ["train"])
    assert (spot.interruptible, spot.price_per_hour_minor, steady.interruptible) == (True, 120, False)
    urgent_t4 = jobs.submit(p, user, ["urgent"], gpus=2, gpu_types=["T4"], priority="high")
    urgent_a100 = jobs.submit(p, user, ["urgent"], gpus=2, gpu_types=["A100-80GB"], priority="high")

    report = schedule_round(p)
    assert report.preempted == [spot.id] and report.started == []  # the on-demand rental is never a victim
    view = show(p, user, spot.id)
    assert view.status == "stopping" and "preempted" in view.status_reason
    deadline_file = p.control_dir(spot.id) / "DANLU_PREEMPT_DEADLINE"  # the run's $DANLU_PREEMPT_FILE
    deadline_s = int(deadline_file.read_text().split()[1])
    assert deadline_s * 1000 >= fake_clock.now_ms() + p.settings.preempt_notice_s * 1000 - 1000
    executor = p.backend
    assert isinstance(executor, RecordingBackend)
    assert executor.signals[-1] == (executor.handles[0], "term")

    executor.die(executor.handles[0], code=0, at_ms=fake_clock.now_ms())  # the notebook saved its work and exited
    reconcile(p)
    assert show(p, user, spot.id).status == "stopped"
    assert schedule_round(p).started == [urgent_t4.id]
    assert jobs.show(p, user, urgent_a100.id).status == "queued"
    assert show(p, user, steady.id).status == "running"


def test_interruptible_rental_needs_an_interruptible_price(p: Platform) -> None:
    from danlu.core.errors import InvalidInput

    user = renter(p, "jon", None)
    with pytest.raises(InvalidInput) as err:
        instances.rent(p, user, "A100-80GB", 1, ["x"], interruptible=True)
    assert err.value.code == "no_interruptible_price"
