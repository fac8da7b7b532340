"""Heterogeneity-aware least-attained-service (LAS), the simulator's time-slicing baseline (pure).

Our own implementation of what Gavel calls LAS (Tiresias-style time slicing, made aware of GPU
types), used as the peer reference that ``danlu`` is measured against on long-tailed traces
(benchmarks/longtail.py); it is not offered to the live server.

Every round (360 s, Gavel's) all jobs, running and queued, are ranked by the service they have
attained so far (``attained_ms``: GPU-milliseconds of progress, counted at the speed of the job's
fastest type, so an hour on a slow type counts for less), least first, arrival order breaking ties
(running first, to avoid swapping equals). The cluster is then filled in that order: a running job
keeps its GPUs if they are still unclaimed; a queued job takes the type where it runs fastest among
hosts with room. Running jobs left out are preempted (with the view's notice; the simulator runs
this baseline with no notice, as Gavel's round-based leases have none) and requeued; their restart
overhead is charged by the engine like any other resume.
"""

from __future__ import annotations

from danlu.scheduling.model import Allocation, ClusterView, Decision, Defer, JobRequest, Preempt, Start


def schedule_las(view: ClusterView) -> list[Decision]:
    now = view.now_ms
    room = {h.id: h.total_gpus for h in view.hosts}
    free = {h.id: h.free_gpus for h in view.hosts}
    model_of = {h.id: h.gpu_model for h in view.hosts}
    stopping = [a for a in view.running if a.stopping_at_ms is not None]
    for alloc in stopping:  # leaving anyway: their GPUs are not this round's to give
        for host_id, gpus in alloc.placed:
            room[host_id] -= gpus
    running = [a for a in view.running if a.stopping_at_ms is None]
    ranked: list[tuple[int, int, int, Allocation | JobRequest]] = [
        (a.attained_ms, 0, i, a) for i, a in enumerate(running)
    ]
    ranked += [(j.attained_ms, 1, j.seq, j) for j in view.queue]
    ranked.sort(key=lambda r: (r[0], r[1], r[2]))
    kept: set[str] = set()
    placed: list[tuple[JobRequest, str]] = []
    for *_, item in ranked:
        if isinstance(item, Allocation):  # a running job keeps its GPUs if nobody with less service took them
            if all(room[h] >= n for h, n in item.placed):
                for h, n in item.placed:
                    room[h] -= n
                kept.add(item.job_id)
            continue
        job = item
        hosts = [h for h, n in room.items() if n >= job.gpus and job.runnable_on(model_of[h])]
        if not hosts:
            continue
        host = min(hosts, key=lambda h: (job.durations_ms[model_of[h]], -free[h], h))
        room[host] -= job.gpus
        placed.append((job, host))
    decisions: list[Decision] = []
    deadline = now + view.notice_ms
    for alloc in running:
        if alloc.job_id not in kept:
            decisions.append(Preempt(alloc.job_id, alloc.host_id, deadline, "", "time slice: least attained service"))
            if view.notice_ms == 0:  # the engine stops it at once, before these starts
                for h, n in alloc.placed:
                    free[h] += n
    for job, host in placed:
        model = model_of[host]
        if free[host] >= job.gpus:
            free[host] -= job.gpus
            end = now + job.durations_ms[model]
            decisions.append(
                Start(job.id, host, model, job.gpus, job.plan, end, "placed by las (least attained service)")
            )
        else:
            decisions.append(Defer(job.id, deadline, "waiting for a time slice's preempted GPUs"))
    return decisions
