"""Gang placement: all GPUs of a job on one host, best fit, in O(max GPUs per host) per query.

:class:`FreeIndex` is a per-round scratch copy of free capacity. Hosts of each GPU model sit in
buckets by their free-GPU count, so "is there a host of model M with >= g free GPUs" and "take
the fullest such host" (best fit keeps big holes for big gangs) never scan all hosts.
"""

from __future__ import annotations

from collections.abc import Iterable

from danlu.scheduling.model import Host


class FreeIndex:
    def __init__(self, hosts: Iterable[Host]) -> None:
        self.free: dict[str, int] = {}
        self.model_of: dict[str, str] = {}
        self.total: dict[str, int] = {}
        self._buckets: dict[str, list[dict[str, None]]] = {}
        self.max_size: dict[str, int] = {}
        for host in hosts:
            self.free[host.id] = host.free_gpus
            self.model_of[host.id] = host.gpu_model
            self.total[host.id] = host.total_gpus
            size = self.max_size.get(host.gpu_model, 0)
            self.max_size[host.gpu_model] = max(size, host.total_gpus)
        for host_id, model in self.model_of.items():
            buckets = self._buckets.setdefault(model, [{} for _ in range(self.max_size[model] + 1)])
            buckets[self.free[host_id]][host_id] = None

    @property
    def models(self) -> list[str]:
        return list(self._buckets)

    def free_total(self, model: str) -> int:
        return sum(k * len(b) for k, b in enumerate(self._buckets.get(model, [])))

    def any_free(self) -> bool:
        return any(len(b) for buckets in self._buckets.values() for b in buckets[1:])

    def largest_free(self, model: str) -> int:
        buckets = self._buckets.get(model)
        if not buckets:
            return 0
        for k in range(len(buckets) - 1, 0, -1):
            if buckets[k]:
                return k
        return 0

    def best_fit(self, model: str, gpus: int) -> str | None:
        """The host of ``model`` with the fewest free GPUs that still holds ``gpus``."""
        buckets = self._buckets.get(model)
        if not buckets or gpus <= 0:
            return None
        for k in range(gpus, len(buckets)):
            if buckets[k]:
                return next(iter(buckets[k]))
        return None

    def hosts_with(self, model: str, gpus: int, limit: int) -> list[str]:
        """Up to ``limit`` hosts of ``model`` with at least ``gpus`` free, fullest first."""
        out: list[str] = []
        for bucket in self._buckets.get(model, [])[max(gpus, 1) :]:
            for host_id in bucket:
                out.append(host_id)
                if len(out) >= limit:
                    return out
        return out

    def take(self, host_id: str, gpus: int) -> None:
        self._move(host_id, self.free[host_id] - gpus)

    def give(self, host_id: str, gpus: int) -> None:
        self._move(host_id, self.free[host_id] + gpus)

    def _move(self, host_id: str, new_free: int) -> None:
        if new_free < 0 or new_free > self.total[host_id]:
            raise ValueError(f"host {host_id} would have {new_free} free GPUs")
        buckets = self._buckets[self.model_of[host_id]]
        del buckets[self.free[host_id]][host_id]
        buckets[new_free][host_id] = None
        self.free[host_id] = new_free

    def hosts_of(self, model: str) -> list[str]:
        return [h for b in self._buckets.get(model, []) for h in b]


def even_split(free: dict[str, int], gpus: int) -> tuple[tuple[str, int], ...] | None:
    """A gang of ``gpus`` over as few hosts as possible with the same count on each (what one Slurm
    allocation of ``--nodes N --gres gpu:K`` holds), from the hosts' free GPUs; best fit among the
    hosts with room (the fewest free first, keeping big holes for big gangs), ties by host id. None
    when no even split fits (pure)."""
    for n in range(2, len(free) + 1):
        if gpus % n:
            continue
        each = gpus // n
        room = sorted((left, host) for host, left in free.items() if left >= each)
        if len(room) >= n:
            return tuple((host, each) for _, host in sorted(room[:n], key=lambda r: r[1]))
    return None
