"""Choosing victims: interruptible or lower-priority work, on one host, with a guaranteed notice.

A running allocation may be preempted for a queued job only if it has lower priority, or is
interruptible while the queued job is not (at equal or lower priority). Victims on a host are
taken lowest priority first, most recently started first (least work lost), and the host needing
the fewest victim GPUs wins. Every preemption carries ``notice_deadline = now + notice``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from danlu.scheduling.model import Allocation, ClusterView, JobRequest
from danlu.scheduling.placement import FreeIndex


def may_preempt(victim: Allocation, job: JobRequest) -> bool:
    if victim.stopping_at_ms is not None:
        return False
    if victim.priority < job.priority:
        return True
    return victim.interruptible and not job.interruptible and victim.priority <= job.priority


@dataclass(slots=True)
class VictimPlan:
    host_id: str
    gpu_model: str
    victims: list[Allocation]
    ready_ms: int  # when the job's GPUs are free: the latest notice deadline involved


class Preemptor:
    def __init__(self, view: ClusterView) -> None:
        self.now = view.now_ms
        self.notice = view.notice_ms
        self.by_host: dict[str, list[Allocation]] = defaultdict(list)
        self.stopping: dict[str, list[Allocation]] = defaultdict(list)
        for alloc in view.running:
            if alloc.stopping_at_ms is None:
                self.by_host[alloc.host_id].append(alloc)
            else:
                self.stopping[alloc.host_id].append(alloc)
        self.taken: set[str] = set()
        live = [a for allocs in self.by_host.values() for a in allocs]
        self.min_priority = min((a.priority for a in live), default=None)
        self.min_interruptible = min((a.priority for a in live if a.interruptible), default=None)

    def possible(self, job: JobRequest) -> bool:
        """Cheap pre-check: is there any running allocation this job may preempt at all?"""
        if self.min_priority is not None and self.min_priority < job.priority:
            return True
        return not job.interruptible and self.min_interruptible is not None and self.min_interruptible <= job.priority

    def plan(self, job: JobRequest, models: list[str], index: FreeIndex) -> VictimPlan | None:
        best: VictimPlan | None = None
        best_cost = 0
        for host_id, allocs in self.by_host.items():
            model = index.model_of.get(host_id)
            if model not in models or index.total[host_id] < job.gpus:
                continue
            candidates = sorted(
                (a for a in allocs if a.job_id not in self.taken and may_preempt(a, job)),
                key=lambda a: (a.priority, -a.start_ms),
            )
            if not candidates:
                continue
            have = index.free[host_id] + sum(a.gpus for a in self.stopping.get(host_id, ()))
            victims: list[Allocation] = []
            for alloc in candidates:
                if have >= job.gpus:
                    break
                victims.append(alloc)
                have += alloc.gpus
            if have < job.gpus or not victims:
                continue
            cost = sum(a.gpus for a in victims)
            if best is None or cost < best_cost:
                ready = max([self.now + self.notice] + [a.release_ms for a in self.stopping.get(host_id, ())])
                best, best_cost = VictimPlan(host_id, model, victims, ready), cost
        if best is not None:
            self.taken.update(a.job_id for a in best.victims)
        return best
