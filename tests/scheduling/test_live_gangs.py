"""Issue 30, item 1 live: a job wider than any one host runs as one gang over several hosts where the
backend spans hosts (Slurm), with the same GPU count on each (one Slurm allocation of ``--nodes N --gres
gpu:K``); on the local backend it is refused at submit with a clear error. A fake backend that spans
hosts, both databases; the real two-node Slurm run is tests/slurm (the gang test there)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import func, select

from danlu.accounts.service import create_user
from danlu.billing import service as billing
from danlu.compute.gpus import parse_simulated_spec
from danlu.compute.reconcile import reconcile
from danlu.context import Platform, Settings
from danlu.core.clock import FakeClock
from danlu.core.errors import InvalidInput
from danlu.db.engine import open_database
from danlu.db.models import Gpu, HostRow, User
from danlu.scheduling import jobs
from danlu.scheduling.live import schedule_round
from danlu.scheduling.placement import even_split
from danlu.server.bootstrap import bootstrap
from tests.conftest import _from_migrated_template
from tests.fakes import RecordingBackend


class SpanningBackend(RecordingBackend):
    spans_hosts = True


@pytest.fixture
def two_hosts(db_url: str, tmp_path: Path) -> Iterator[tuple[Platform, SpanningBackend, User]]:
    """Two hosts n0 and n1 of 4 A100s each, like two Slurm nodes."""
    _from_migrated_template(db_url)
    db = open_database(db_url)
    clock = FakeClock(1_700_000_000_000)
    gpus = [
        replace(g, host=host, uuid=f"{host}-{g.uuid}")
        for host in ("n0", "n1")
        for g in parse_simulated_spec("A100-80GB:4", host)
    ]
    bootstrap(db, tmp_path, "CNY", gpus, clock.now_ms())
    backend = SpanningBackend()
    p = Platform(db=db, clock=clock, backend=backend, settings=Settings(data_dir=tmp_path))
    billing.set_price(p, "A100-80GB", "36.00")
    with p.db.write() as s:
        user, _ = create_user(s, "gia", 0)
        s.expunge(user)
    billing.admin_topup(p, "gia", "1000.00", "seed")
    yield p, backend, user
    db.engine.dispose()


def _claimed(p: Platform) -> dict[str, int]:
    with p.db.read() as s:
        rows = s.execute(
            select(HostRow.name, func.count())
            .join(Gpu, Gpu.host_id == HostRow.id)
            .where(Gpu.allocation_id.is_not(None))
            .group_by(HostRow.name)
        ).all()
    return {str(name): int(n) for name, n in rows}


def test_a_job_wider_than_any_host_runs_as_one_gang_over_both(
    two_hosts: tuple[Platform, SpanningBackend, User],
) -> None:
    p, backend, user = two_hosts
    job = jobs.submit(p, user, ["train"], gpus=8)  # accepted: no host has 8, two have 4 each
    assert schedule_round(p).started == [job.id]
    spec = backend.launched[-1]
    assert spec.nodes == ("n0", "n1") and spec.host == "n0" and spec.gpu_count == 8
    assert [e["CUDA_VISIBLE_DEVICES"] for e in spec.node_env] == ["0,1,2,3", "0,1,2,3"]  # each node its own
    assert len(spec.devices) == 8 and spec.limits is not None
    with p.db.read() as s:
        host = s.scalars(select(HostRow).where(HostRow.name == "n0")).one()
    assert spec.limits.cpus_milli == host.cpus_per_gpu_milli * 4  # one node's limits, not the gang's
    assert _claimed(p) == {"n0": 4, "n1": 4}
    assert "over 2 hosts" in jobs.show(p, user, job.id).status_reason
    other = jobs.submit(p, user, ["wait"], gpus=4)
    assert schedule_round(p).started == []  # every GPU is the gang's
    backend.die(backend.last(), code=0, at_ms=p.clock.now_ms())
    reconcile(p)
    assert schedule_round(p).started == [other.id]  # the gang ended as one: all 8 GPUs back
    assert jobs.show(p, user, job.id).status == "succeeded"


def test_an_uneven_spread_is_split_evenly_or_waits(two_hosts: tuple[Platform, SpanningBackend, User]) -> None:
    """One Slurm allocation holds the same count on each node: with 3 free on one host and 4 on the other,
    6 GPUs go 3 + 3 (the core's most-free-first spread would be 4 + 2); with 4 and 2 free they wait; 7 can
    never be split evenly over two hosts of 4 and are refused at submit."""
    p, backend, user = two_hosts
    small = jobs.submit(p, user, ["one"], gpus=1)
    assert schedule_round(p).started == [small.id]
    six = jobs.submit(p, user, ["six"], gpus=6)
    assert schedule_round(p).started == [six.id]
    assert sorted(_claimed(p).values()) == [3, 4]  # 1 + 3 on one host, 3 on the other
    assert backend.launched[-1].nodes and len(backend.launched[-1].devices) == 6
    for handle in list(backend.handles):
        backend.die(handle, code=0, at_ms=p.clock.now_ms())
    reconcile(p)
    schedule_round(p)  # settles both
    two = jobs.submit(p, user, ["two"], gpus=2)
    assert schedule_round(p).started == [two.id]
    six = jobs.submit(p, user, ["six"], gpus=6)  # 4 + 2 free: enough, but not 3 + 3
    assert schedule_round(p).started == []
    assert jobs.show(p, user, six.id).status == "queued"
    assert "same free GPU count on each" in jobs.show(p, user, six.id).status_reason
    with pytest.raises(InvalidInput) as refused:
        jobs.submit(p, user, ["seven"], gpus=7)
    assert "nor the same count on each of several hosts" in refused.value.message


def test_the_local_backend_refuses_a_job_wider_than_its_host(
    two_hosts: tuple[Platform, SpanningBackend, User],
) -> None:
    p, _, user = two_hosts
    p.backend = RecordingBackend()  # spans_hosts False: every run on one host
    with pytest.raises(InvalidInput) as refused:
        jobs.submit(p, user, ["train"], gpus=8)
    assert refused.value.code == "no_matching_gpus"
    assert "gangs across hosts need the Slurm backend" in refused.value.message


def test_even_split_takes_the_fewest_hosts_with_the_same_count_on_each() -> None:
    assert even_split({"a": 4, "b": 4}, 8) == (("a", 4), ("b", 4))
    assert even_split({"a": 3, "b": 4}, 6) == (("a", 3), ("b", 3))
    assert even_split({"a": 4, "b": 3}, 7) is None
    assert even_split({"a": 2, "b": 2, "c": 2, "d": 4}, 6) == (("a", 2), ("b", 2), ("c", 2))
    assert even_split({"a": 8, "b": 1, "c": 8}, 8) == (("a", 4), ("c", 4))
