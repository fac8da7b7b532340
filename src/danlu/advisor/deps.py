"""FastAPI dependencies the advisor router needs from the rest of the platform.

The lead overrides them (``app.dependency_overrides[get_platform_offers] = ...``) to read the
database; by default the platform has no offers and no extra plans, so advice uses the public
catalog only.
"""

from __future__ import annotations

from danlu.advisor.plans import PlatformOffer, PlatformPlans


def get_platform_offers() -> list[PlatformOffer]:
    return []


def get_platform_plans() -> PlatformPlans:
    return PlatformPlans()
