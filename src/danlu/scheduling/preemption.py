"""Choosing victims: interruptible or lower-priority work, on one host, with a guaranteed notice.

A running allocation may be preempted for a queued job only if it has lower priority, or is
interruptible while the queued job is not (at equal or lower priority), or, under a policy that
demotes by attained service (:class:`Demotion`), it checkpoints, has had its share of service and
its slice, and the queued job is small and has had little. Victims on a host are taken lowest
priority first, then plain preemptions before demotions, then most service attained first, then
most recently started (least work lost); the host needing the fewest victim GPUs wins. Every
preemption carries ``notice_deadline = now + notice``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from danlu.scheduling.model import Allocation, ClusterView, JobRequest
from danlu.scheduling.placement import FreeIndex
from danlu.scheduling.policies import Policy, min_duration


def may_preempt(victim: Allocation, job: JobRequest) -> bool:
    if victim.stopping_at_ms is not None:
        return False
    if victim.priority < job.priority:
        return True
    return victim.interruptible and not job.interruptible and victim.priority <= job.priority


@dataclass(frozen=True, slots=True)
class Demotion:
    """The demotion rule of one round (Tiresias' two queues with danlu's estimates)."""

    now_ms: int
    after_ms: int  # attained GPU-ms from which a running job is in the lower queue
    min_slice_ms: int  # it runs at least this long per start before it may be demoted

    def allows(self, victim: Allocation, job: JobRequest) -> bool:
        if victim.stopping_at_ms is not None or not victim.checkpoints or victim.priority != job.priority:
            return False
        if job.interruptible and not victim.interruptible:
            return False  # on-demand work never makes way for cheaper interruptible work
        if victim.attained_ms < self.after_ms or job.attained_ms >= self.after_ms:
            return False
        if self.now_ms - victim.start_ms < self.min_slice_ms:
            return False
        # only for work smaller than what the victim has left: short jobs first, as danlu's order
        left = max(0, victim.est_end_ms - self.now_ms) * victim.gpus
        return min_duration(job) * job.gpus < left


def demotion_for(view: ClusterView, policy: Policy) -> Demotion | None:
    if policy.demote_after_ms is None:
        return None
    return Demotion(view.now_ms, policy.demote_after_ms, policy.min_slice_ms)


@dataclass(slots=True)
class VictimPlan:
    host_id: str
    gpu_model: str
    victims: list[Allocation]
    ready_ms: int  # when the job's GPUs are free: the latest notice deadline involved


class Preemptor:
    def __init__(self, view: ClusterView, demotion: Demotion | None = None) -> None:
        self.demotion = demotion
        self.now = view.now_ms
        self.notice = view.notice_ms
        self.by_host: dict[str, list[Allocation]] = defaultdict(list)
        self.stopping: dict[str, list[Allocation]] = defaultdict(list)
        for alloc in view.running:  # a gang spread over hosts is listed on each of them
            for host_id, _ in alloc.placed:
                (self.by_host if alloc.stopping_at_ms is None else self.stopping)[host_id].append(alloc)
        self.taken: set[str] = set()
        live = [a for allocs in self.by_host.values() for a in allocs]
        self.min_priority = min((a.priority for a in live), default=None)
        self.min_interruptible = min((a.priority for a in live if a.interruptible), default=None)
        self.max_attained = max((a.attained_ms for a in live if a.checkpoints), default=-1)

    def possible(self, job: JobRequest) -> bool:
        """Cheap pre-check: is there any running allocation this job may preempt at all?"""
        if self.min_priority is not None and self.min_priority < job.priority:
            return True
        if self.may_demote_for(job):
            return True
        return not job.interruptible and self.min_interruptible is not None and self.min_interruptible <= job.priority

    def may_demote_for(self, job: JobRequest) -> bool:
        d = self.demotion
        return d is not None and job.attained_ms < d.after_ms <= self.max_attained

    def plan(self, job: JobRequest, models: list[str], index: FreeIndex, *, demote: bool = False) -> VictimPlan | None:
        """The cheapest set of victims on one host; ``demote``: demotions (see :class:`Demotion`)
        may be among them."""
        demotion = self.demotion if demote else None

        def allowed(a: Allocation) -> tuple[bool, bool]:  # (may be a victim, only as a demotion)
            if may_preempt(a, job):
                return True, False
            return (demotion is not None and demotion.allows(a, job)), True

        best: VictimPlan | None = None
        best_cost = 0
        for host_id, allocs in self.by_host.items():
            model = index.model_of.get(host_id)
            if model not in models or index.total[host_id] < job.gpus:
                continue
            ranked = []
            for a in allocs:
                if a.job_id not in self.taken:
                    ok, demoted = allowed(a)
                    if ok:
                        ranked.append(((a.priority, demoted, -a.attained_ms if demoted else 0, -a.start_ms), a))
            ranked.sort(key=lambda r: r[0])
            candidates = [a for _, a in ranked]
            if not candidates:
                continue
            have = index.free[host_id] + sum(_on(a, host_id) for a in self.stopping.get(host_id, ()))
            victims: list[Allocation] = []
            for alloc in candidates:
                if have >= job.gpus:
                    break
                victims.append(alloc)
                have += _on(alloc, host_id)
            if have < job.gpus or not victims:
                continue
            cost = sum(a.gpus for a in victims)
            if best is None or cost < best_cost:
                ready = max([self.now + self.notice] + [a.release_ms for a in self.stopping.get(host_id, ())])
                best, best_cost = VictimPlan(host_id, model, victims, ready), cost
        if best is not None:
            self.taken.update(a.job_id for a in best.victims)
        return best


def _on(alloc: Allocation, host_id: str) -> int:
    """GPUs ``alloc`` holds on ``host_id`` (all of them unless its gang is spread over hosts)."""
    return sum(n for h, n in alloc.placed if h == host_id)
