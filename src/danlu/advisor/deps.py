"""FastAPI dependencies the advisor router needs from the rest of the platform.

The app provides this platform's offers as ``app.state.platform_offers`` (a function of no
arguments); without it the platform has no offers and no extra plans, so advice uses the public
catalog only. (Not ``app.dependency_overrides``: any override makes FastAPI re-resolve every
route's dependencies on every request, which cost a third of our throughput.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fastapi import Request

from danlu.advisor.plans import PlatformOffer, PlatformPlans


def get_platform_offers(request: Request) -> Sequence[PlatformOffer]:
    provider: Callable[[], Sequence[PlatformOffer]] | None = getattr(request.app.state, "platform_offers", None)
    return provider() if provider is not None else []


def get_platform_plans(request: Request) -> PlatformPlans:
    """This platform's plans beyond on-demand (``app.state.platform_plans``): the packages and
    reserved commitments on sale now; none without it."""
    provider: Callable[[], PlatformPlans] | None = getattr(request.app.state, "platform_plans", None)
    return provider() if provider is not None else PlatformPlans()
