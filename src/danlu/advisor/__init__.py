"""The advisor: which GPU (memory fit), how long (time model), which plan and platform (cost ranking),
rent or buy. Pure functions and dataclasses; the shells call :mod:`danlu.advisor.service`."""

from danlu.advisor.plans import PlatformOffer, PlatformPlans

__all__ = ["PlatformOffer", "PlatformPlans"]
