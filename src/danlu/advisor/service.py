"""The advisor's service functions: the one call each shell (CLI, API) makes. Pure: no I/O but the
cached, offline price catalog; ``today`` is passed in (no wall clock below the shell)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import date
from decimal import Decimal
from typing import Any

from danlu.advisor.plan_recommender import UsageProfile, recommend_plan
from danlu.advisor.plans import PlatformOffer, PlatformPlans, cost_minor, hours_decimal
from danlu.advisor.ranking import Option, catalog_sources, platform_sources, rank_options
from danlu.advisor.rent_buy import BuyInputs, BuyResult, rent_or_buy
from danlu.advisor.timing import Measured
from danlu.advisor.workload import Workload, within
from danlu.catalog.gpu_models import resolve_model
from danlu.catalog.prices import OUTLIER_DIVISOR, PriceCatalog, PriceRow, models_matching, price_catalog, source_label
from danlu.core.errors import InvalidInput
from danlu.core.money import exponent, format_minor, parse_amount

CURRENCY_NOTE = (
    "costs are never converted between currencies: each option states its currency; the primary currency ranks first"
)
OUTLIER_NOTE = (
    f"prices under 1/{OUTLIER_DIVISOR} of the other providers' median for the GPU model are outliers: "
    "left out unless include_outliers (--include-outliers), and marked when shown"
)


@dataclass(frozen=True, slots=True)
class AdviceResult:
    options: list[Option]
    primary_currency: str
    catalog: PriceCatalog
    catalog_age_days: int
    outliers_left_out: int = 0  # catalog rows flagged outlier and not ranked

    def meta(self) -> dict[str, Any]:
        return {
            "primary_currency": self.primary_currency,
            "currency_note": CURRENCY_NOTE,
            "catalog_snapshot": self.catalog.snapshot.isoformat(),
            "catalog_origin": self.catalog.origin,
            "catalog_age_days": self.catalog_age_days,
            "outliers_left_out": self.outliers_left_out,
            "outlier_note": OUTLIER_NOTE,
        }


def advise(
    workload: Workload,
    *,
    today: date,
    platform_offers: Sequence[PlatformOffer] = (),
    platform_plans: PlatformPlans | None = None,
    include_public: bool = True,
    deadline_hours: float | None = None,
    measured_per_second: float | None = None,
    measured_gpu: str | None = None,
    measured_gpu_count: int = 1,
    preemption_overhead: float = 0.10,
    currency: str | None = None,
    gpu: str | None = None,
    include_outliers: bool = False,
) -> AdviceResult:
    """Rank every GPU model × count × place × plan for ``workload`` (see :func:`rank_options`).

    Public prices: the newest row of each instance; rows flagged ``outlier`` only with
    ``include_outliers`` (then ranked by cost like the rest, and marked)."""
    catalog = price_catalog()
    measured = None
    if measured_per_second is not None:
        within("measured", measured_per_second, 1e-6, 1e12, lo_open=False)
        within("measured_count", measured_gpu_count, 1, 4096, lo_open=False)
        if not measured_gpu:
            raise InvalidInput("missing_measured_gpu", "say which GPU the throughput was measured on (--measured-on)")
        measured = Measured(measured_per_second, resolve_model(measured_gpu), measured_gpu_count)
    sources = platform_sources(platform_offers, platform_plans or PlatformPlans())
    if include_public:
        sources += catalog_sources(catalog, include_outliers)
    if currency:
        exponent(currency)
    primary = (currency or (platform_offers[0].currency if platform_offers else "USD")).upper()
    options = rank_options(
        workload,
        sources,
        deadline_hours=deadline_hours,
        measured=measured,
        preemption_overhead=preemption_overhead,
        primary_currency=primary,
        only_models=models_matching(gpu) if gpu else None,
    )
    if not options and deadline_hours is None:
        what = f"{gpu!r}" if gpu else "any GPU"
        raise InvalidInput(
            "no_priced_option",
            f"no price is known for {what} in the catalog or this platform's offers; try another --gpu",
        )
    if not options and deadline_hours is not None:
        unbounded = rank_options(
            workload,
            sources,
            measured=measured,
            preemption_overhead=preemption_overhead,
            primary_currency=primary,
            only_models=models_matching(gpu) if gpu else None,
        )
        fastest = min((o for o in unbounded if o.fits), key=lambda o: o.hours, default=None)
        what = (
            f"the fastest option takes {fastest.hours:.3g} h "
            f"({fastest.gpu_count}x {fastest.gpu_model}, {fastest.provider})"
            if fastest
            else "no option fits this workload at all"
        )
        raise InvalidInput(
            "no_option_meets_deadline", f"nothing finishes within {deadline_hours:g} h: {what}; relax --deadline"
        )
    left_out = len(outlier_rows(gpu)) if include_public and not include_outliers else 0
    return AdviceResult(options, primary, catalog, catalog.age_days(today), left_out)


def compare(
    gpu: str,
    *,
    hours: float = 1.0,
    count: int = 1,
    spot: bool = False,
    multi_machine: bool = False,
    include_outliers: bool = False,
) -> list[dict[str, Any]]:
    """Public catalog rows for ``gpu`` (a model or a family), cheapest total first.

    Only the rows in use: the newest of each instance (older ones are superseded), and rows flagged
    ``outlier`` only with ``include_outliers`` (ranked by total like the rest, ``outlier`` true).
    Each row names its ``source`` (``source_label`` for tables) and ``as_of``, when it was observed.

    ``count`` GPUs on **one machine** (what a multi-GPU job needs, and what ``advise`` assumes):
    instances with fewer GPUs are left out. ``multi_machine`` also offers several smaller
    instances (``machines`` of them), for work that needs no fast link between its GPUs.
    ``price_per_hour`` is for whole instances: a 1-GPU need on an 8-GPU instance pays 8.
    """
    within("hours", hours, 0, 1e6, code="invalid_compare_input")
    within("count", count, 1, 4096, code="invalid_compare_input", lo_open=False)
    names = set(models_matching(gpu))
    rows = []
    # the rows advise ranks (catalog_sources: one row per instance and terms, its regions collapsed),
    # so compare and advise read the same prices
    for r in catalog_sources(price_catalog(), include_outliers):
        if r.gpu_model not in names or r.as_of is None:
            continue
        rate = r.spot_rate if spot else r.rate
        if rate is None:
            continue
        machines = -(-count // r.gpus_per_instance)
        if machines > 1 and not multi_machine:
            continue  # N single-GPU machines are not one N-GPU machine
        billed = machines * r.gpus_per_instance
        per_hour = rate * billed
        total = cost_minor(rate, hours_decimal(hours) * billed, r.currency)
        rows.append(
            {
                "provider": r.provider,
                "region": r.regions[0] if r.regions else r.region,  # a region code, the first of them
                "regions": list(r.regions or (r.region,)),
                "gpu_model": r.gpu_model,
                "instance_type": r.instance_type,
                "gpus_billed": billed,
                "machines": machines,
                "price_per_hour": str(per_hour.normalize()) if per_hour else "0",
                "total": format_minor(total, r.currency),
                "currency": r.currency,
                "spot": spot,
                "as_of": r.as_of.isoformat(),
                "source": r.source,
                "source_label": source_label(r.source),
                "outlier": r.outlier,
                "_total_minor": total,
            }
        )
    rows.sort(key=lambda x: (x["currency"], x["_total_minor"], x["provider"], x["region"]))
    for row in rows:
        del row["_total_minor"]
    if not rows:
        kind = "spot" if spot else "on-demand"
        where = "" if multi_machine or count == 1 else f" on one machine with {count} GPUs (--multi-machine: several)"
        hidden = not include_outliers and any(
            r.outlier and r.gpu_model in names for r in price_catalog().usable(include_outliers=True)
        )
        raise InvalidInput(
            "no_prices",
            f"the price catalog has no {kind} prices for {gpu!r}{where}; try another GPU"
            + (" or drop --spot" if spot else "")
            + (" (outlier prices are left out: --include-outliers shows them)" if hidden else ""),
        )
    return rows


def outlier_rows(gpu: str | None = None) -> list[PriceRow]:
    """Catalog rows in use that are flagged outlier (for ``gpu``, a model or a family, if given)."""
    names = set(models_matching(gpu)) if gpu else None
    return [r for r in price_catalog().usable(True) if r.outlier and (names is None or r.gpu_model in names)]


def row_origin(r: PriceRow) -> str:
    """Where a catalog price comes from, for people: provider, region, source, date, flag."""
    flag = "; OUTLIER: far below the other providers' median" if r.outlier else ""
    return f"{r.provider} {r.region} (public catalog: {r.source_label}, {r.as_of.isoformat()}{flag})"


def hourly_rate_for(
    gpu: str, platform_offers: Sequence[PlatformOffer], *, include_outliers: bool = False
) -> tuple[Decimal, str, str]:
    """(rate per GPU-hour, currency, origin): this platform's offer, else the cheapest public on-demand
    row in use (the newest of its instance; not an outlier unless ``include_outliers``)."""
    names = set(models_matching(gpu))
    for o in platform_offers:
        if o.gpu_model in names and o.price_per_hour_minor is not None:
            return Decimal(o.price_per_hour_minor).scaleb(-exponent(o.currency)), o.currency, "this platform"
    rows = [r for r in price_catalog().usable(include_outliers) if r.gpu_model in names and r.currency == "USD"]
    if not rows:
        raise InvalidInput("no_prices", f"no price known for {gpu!r}; pass --price")
    best = min(rows, key=lambda r: (r.price_per_gpu_hour, r.provider, r.region))
    return best.price_per_gpu_hour, best.currency, row_origin(best)


def plan_advice(
    gpu: str,
    profile: UsageProfile,
    *,
    gpus: int = 1,
    platform_offers: Sequence[PlatformOffer] = (),
    platform_terms: dict[str, int] | None = None,
    discounts: dict[str, Decimal] | None = None,
    rate: Decimal | None = None,
    currency: str = "USD",
    include_outliers: bool = False,
) -> dict[str, Any]:
    """The plan recommendation for ``gpu`` at the given or the best known hourly rate. Packages and
    reservations are priced at ``discounts`` (term → percent, a what-if the user gives) or else, when
    the rate is this platform's, at the terms this platform sells (``platform_terms``: term → basis
    points); otherwise only hourly is priced, and the answer says why."""
    origin = "given"
    if rate is None:
        rate, currency, origin = hourly_rate_for(gpu, platform_offers, include_outliers=include_outliers)
    if discounts:
        used, source = discounts, "given"
    elif origin == "this platform" and platform_terms:
        used, source = {t: Decimal(bp) / 100 for t, bp in platform_terms.items()}, "this platform's terms on sale"
    else:
        used = {}
        source = (
            "none: this platform sells no packages or reservations"
            if origin == "this platform"
            else "none: give what-if discounts (--discount TERM=PCT) to compare packages at this rate"
        )
    rec = recommend_plan(profile, rate, currency.upper(), gpus, used)
    return {**rec.to_dict(), "hourly_rate": str(rate), "rate_source": origin, "discount_source": source}


def buy_advice(
    gpu: str,
    *,
    purchase_price: str,
    currency: str = "USD",
    rent_rate: Decimal | None = None,
    kwh_price: Decimal = Decimal("0.15"),
    pue: Decimal = Decimal("1.5"),
    years: int = 3,
    resale_pct: Decimal = Decimal(20),
    utilisation: Decimal = Decimal("0.5"),
    hosting_per_month: str = "0",
    platform_offers: Sequence[PlatformOffer] = (),
    include_outliers: bool = False,
) -> BuyResult:
    """Rent-or-buy for one GPU of ``gpu`` at its table TDP; the rent rate defaults to the best known one
    (this platform's, else the cheapest public row in use, outliers only if ``include_outliers``)."""
    model = resolve_model(gpu)
    currency = currency.upper()
    origin = "given"
    if rent_rate is None:
        rent_rate, rate_currency, origin = hourly_rate_for(
            model.name, platform_offers, include_outliers=include_outliers
        )
        if rate_currency != currency:
            raise InvalidInput(
                "currency_mismatch",
                f"the known rent rate is in {rate_currency}; "
                f"give a rent rate in {currency} or use currency {rate_currency}",
            )
    result = rent_or_buy(
        BuyInputs(
            parse_amount(purchase_price, currency, allow_zero=False, field="purchase price"),
            currency,
            rent_rate,
            Decimal(model.tdp_w),
            kwh_price,
            pue,
            years,
            resale_pct,
            utilisation,
            parse_amount(hosting_per_month, currency, field="hosting per month"),
        )
    )
    return replace(result, rent_rate=rent_rate, rent_rate_source=origin)
