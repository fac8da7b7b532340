"""Fair share with decaying usage, and per-user GPU quotas.

Usage is GPU-hours that halve every ``half_life_ms`` (Slurm's PriorityDecayHalfLife). A user's
fair-share factor is ``2 ** -(usage_share / entitled_share)`` (Slurm's classic formula): 1 for a
user who used nothing, 0.5 for one who used exactly their share, towards 0 for heavy users.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

DEFAULT_HALF_LIFE_MS = 7 * 24 * 3_600_000


def decay(usage: Mapping[str, float], elapsed_ms: int, half_life_ms: int = DEFAULT_HALF_LIFE_MS) -> dict[str, float]:
    if elapsed_ms <= 0:
        return dict(usage)
    factor = 0.5 ** (elapsed_ms / half_life_ms)
    return {user: value * factor for user, value in usage.items() if value * factor > 1e-9}


def fairshare_factors(
    users: Iterable[str], usage: Mapping[str, float], shares: Mapping[str, float]
) -> dict[str, float]:
    users = set(users)
    total_usage = sum(usage.values())
    if total_usage <= 0:
        return dict.fromkeys(users, 1.0)
    known = users | set(usage)
    total_shares = sum(shares.get(u, 1.0) for u in known)
    out: dict[str, float] = {}
    for user in users:
        entitled = shares.get(user, 1.0) / total_shares
        used = usage.get(user, 0.0) / total_usage
        out[user] = 2.0 ** (-used / entitled) if entitled > 0 else 0.0
    return out


def within_quota(user: str, gpus: int, in_use: Mapping[str, int], quotas: Mapping[str, int]) -> bool:
    quota = quotas.get(user)
    return quota is None or in_use.get(user, 0) + gpus <= quota
