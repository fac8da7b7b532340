"""``danlu advise`` (+ ``advise plan``, ``advise buy``), ``danlu compare`` and ``danlu prices``.

``danlu advise`` computes locally from the bundled catalog. With ``DANLU_URL`` set it asks that server
(``POST {DANLU_URL}/api/v1/advice``, bearer ``DANLU_TOKEN``) so this platform's offers are included; an
unreachable server is an error, never a silent fallback. The source used is printed on stderr.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import typer

from danlu.advisor import service
from danlu.advisor.chart import svg_chart, text_chart
from danlu.advisor.plan_recommender import UsageProfile
from danlu.advisor.workload import build_workload
from danlu.catalog.prices import import_catalog, price_catalog
from danlu.cli.output import JsonOpt, console, err_console, fail, print_json, print_table
from danlu.core.errors import DanluError

advise_app = typer.Typer(help="Which GPU, how long, which plan, rent or buy: numbers before you spend.")
prices_app = typer.Typer(help="The bundled public GPU price catalog: its age, and importing a newer one.")

OPTION_COLUMNS = [
    ("gpu_model", "GPU"),
    ("gpu_count", "N"),
    ("fit", "fits"),
    ("memory", "GiB/GPU"),
    ("hours", "hours"),
    ("cost", "cost"),
    ("currency", "cur"),
    ("provider_from", "provider, price from"),
    ("region", "region"),
    ("plan", "plan"),
    ("fixes", "to fit"),
]
OUTLIERS_OPT = typer.Option(
    False,
    "--include-outliers",
    help="Also use prices flagged as outliers (under 1/3 of the other providers' median); they are marked.",
)


def _price_from(o: dict[str, Any]) -> str:
    """Which source and date a price comes from, and OUTLIER when it is flagged."""
    label = o.get("source_label") or o.get("source") or ""
    text = " ".join(x for x in (label, o.get("as_of") or "") if x)
    return f"{text} OUTLIER" if o.get("outlier") else text


def _outlier_note(n: int) -> None:
    if n:
        err_console.print(
            f"{n} outlier price row(s) left out (under 1/3 of the other providers' median for the GPU model; "
            "--include-outliers shows them, marked)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def _fit_cells(o: dict[str, Any]) -> dict[str, str]:
    """``yes``, ``no`` or ``tight (1.2% left)``, and memory as the card names it: 79.3/80 GiB."""
    fit = "no" if not o["fits"] else (f"tight ({o.get('headroom_pct')}% left)" if o.get("tight") else "yes")
    gib, cap = o.get("memory_gib"), o.get("capacity_gib")
    mem = f"{gib:.1f}/{cap:.0f}" if gib is not None and cap is not None else str(o.get("memory_gb"))
    return {"fit": fit, "memory": mem}


def _today() -> Any:
    return datetime.now(UTC).date()


def _source(text: str) -> None:
    err_console.print(f"source: {text}", markup=False, highlight=False)


def _remote(body: dict[str, Any], url: str, path: str = "/advice") -> dict[str, Any]:
    token = os.environ.get("DANLU_TOKEN", "")
    endpoint = url.rstrip("/") + "/api/v1" + path
    import httpx  # only when a server is asked

    try:
        resp = httpx.post(endpoint, json=body, headers={"Authorization": f"Bearer {token}"}, timeout=10.0)
    except httpx.HTTPError as exc:
        fail(
            f"DANLU_URL is set but {endpoint} is unreachable ({exc.__class__.__name__}); "
            "start the server, fix DANLU_URL, or unset it to advise from the bundled catalog only",
            "server_unreachable",
        )
    if resp.status_code != 200:
        try:
            detail = resp.json()
        except ValueError:
            detail = {"message": resp.text[:200]}
        err = detail.get("error", detail) if isinstance(detail, dict) else {}
        fail(
            f"server answered {resp.status_code}: {err.get('message', detail)}",
            err.get("code", "server_error"),
        )
    data: dict[str, Any] = resp.json()
    return data


@advise_app.callback(invoke_without_command=True)
def advise(
    ctx: typer.Context,
    params: float = typer.Option(None, help="Parameter count, e.g. 7e9."),
    model: str = typer.Option(None, help="Preset: llama-7b/13b/33b/65b, bert-base, bert-large, resnet50, sdxl-unet."),
    task: str = typer.Option("finetune", help="train, finetune or inference."),
    precision: str = typer.Option("bf16", help="fp32, bf16, fp16 (mixed); int8, int4 for inference."),
    optimizer: str = typer.Option("adamw", help="adamw, adam, sgd, adam8bit."),
    micro_batch: int = typer.Option(1, help="Per-GPU micro-batch."),
    seq_len: int = typer.Option(None, help="Sequence length (default: preset's, else 2048)."),
    image_size: int = typer.Option(None, help="Image side in pixels (conv nets)."),
    grad_accum: int = typer.Option(1, help="Gradient accumulation steps."),
    checkpointing: bool = typer.Option(False, "--checkpointing", help="Activation checkpointing."),
    adapter: str = typer.Option("none", help="none, lora or qlora."),
    lora_rank: int = typer.Option(16, help="LoRA rank."),
    sharding: str = typer.Option("auto", help="auto, ddp, zero1, zero2, zero3, fsdp."),
    tokens: float = typer.Option(None, help="Tokens to process (all epochs)."),
    samples: float = typer.Option(None, help="Samples per epoch (with --epochs)."),
    epochs: float = typer.Option(1.0, help="Epochs over --samples."),
    deadline: float = typer.Option(None, help="Deadline in hours: slower options are dropped."),
    measured: float = typer.Option(None, help="Your measured throughput (tokens or samples per second)."),
    measured_on: str = typer.Option(None, help="GPU model the throughput was measured on."),
    measured_count: int = typer.Option(1, help="GPUs used for the measurement."),
    preemption_overhead: float = typer.Option(0.10, help="Extra time fraction on interruptible plans."),
    gpu: str = typer.Option(None, help="Only this GPU model or family (A100)."),
    currency: str = typer.Option(None, help="Currency that ranks first (default: platform's, else USD)."),
    top: int = typer.Option(20, help="Rows in the table (JSON has all)."),
    include_outliers: bool = OUTLIERS_OPT,
    resize: str = typer.Option(
        None, "--resize", metavar="ID", help="A stopped rental of yours: say how to start it on the best option here."
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Rank GPU options for a workload by total cost, with fit, memory and time."""
    if ctx.invoked_subcommand is not None:
        return
    if top < 1:
        fail("--top is the number of rows to show, at least 1 (--json prints them all)", "invalid_top")
    url = os.environ.get("DANLU_URL")
    if resize and not url:
        fail("--resize needs this platform's offers: set DANLU_URL (and DANLU_TOKEN) to its server", "invalid_resize")
    body: dict[str, Any] = {
        "params": params,
        "model": model,
        "task": task,
        "precision": precision,
        "optimizer": optimizer,
        "micro_batch": micro_batch,
        "seq_len": seq_len,
        "image_size": image_size,
        "grad_accum": grad_accum,
        "checkpointing": checkpointing,
        "adapter": adapter,
        "lora_rank": lora_rank,
        "sharding": sharding,
        "tokens": tokens,
        "samples": samples,
        "epochs": epochs,
    }
    extra: dict[str, Any] = {
        "deadline_hours": deadline,
        "measured_per_second": measured,
        "measured_gpu": measured_on,
        "measured_gpu_count": measured_count,
        "preemption_overhead": preemption_overhead,
        "currency": currency,
        "gpu": gpu,
    }
    if include_outliers:  # sent only when asked: a server without the field still answers the rest
        extra["include_outliers"] = True
    try:
        workload = build_workload(**body)  # validate locally first, in both modes
        if url:
            data = _remote({**body, **extra}, url)
            options, meta = data.pop("options"), data
            _source(f"server {url} ({meta.get('source')}); catalog {meta.get('catalog_snapshot')}")
        else:
            result = service.advise(workload, today=_today(), **extra)
            options, meta = [o.to_dict() for o in result.options], result.meta()
            _source(
                f"local (bundled public catalog {meta['catalog_snapshot']}, oldest price "
                f"{meta['catalog_age_days']} days old; no platform offers: set DANLU_URL to include them)"
            )
    except DanluError as exc:
        fail(exc.message, exc.code)
    if as_json:
        print_json(options)
        return
    rows = [
        {
            **o,
            **_fit_cells(o),
            "provider_from": f"{o['provider']}\n{_price_from(o)}",
            "fixes": "; ".join(o["fixes"][:2]),
        }
        for o in options[:top]
    ]
    print_table(rows, OPTION_COLUMNS, title=f"advice ({len(options)} options; {meta['currency_note']})")
    _outlier_note(int(meta.get("outliers_left_out") or 0))
    _spread_notes(options[:top])
    if url:
        _here_note(options, resize)


def _here_note(options: list[dict[str, Any]], resize: str | None) -> None:
    """The cheapest option that fits and is rentable on this platform, as the command that rents it — or, with
    ``--resize ID``, that starts the renter's stopped rental on it (the price is shown again before it starts)."""
    plans = ("on-demand",) if resize else ("on-demand", "interruptible")  # a resize keeps the rental's plan
    here = (o for o in options if o.get("on_this_platform") and o["fits"] and o["plan"] in plans)
    best = next(here, None)
    if best is None:
        console.print("no option on this platform fits this workload", markup=False, highlight=False)
        return
    shape = f"--gpu {best['gpu_model']} --count {best['gpu_count']}"
    if best["plan"] == "interruptible":
        shape += " --interruptible"
    command = f"danlu start {resize} {shape}" if resize else f"danlu rent {shape} -- COMMAND"
    console.print(
        f"here, the cheapest that fits: {best['gpu_count']}× {best['gpu_model']} ({best['plan']}, {best['cost']} "
        f"{best['currency']}): {command}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def _spread_notes(options: list[dict[str, Any]]) -> None:
    """One line per GPU model and count in the table whose identical machines scaled differently (issue 31)."""
    seen = set()
    for o in options:
        spread = o.get("scaling_measured")
        if spread and (o["gpu_model"], o["gpu_count"]) not in seen:
            seen.add((o["gpu_model"], o["gpu_count"]))
            console.print(
                f"{o['gpu_model']} × {spread['text']}; the estimate uses the median",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )


@advise_app.command("plan")
def advise_plan(
    gpu: str = typer.Option(..., help="GPU model (price from this platform or the public catalog)."),
    hours_per_day: float = typer.Option(..., help="Hours of use per day."),
    days_per_week: float = typer.Option(7, help="Days of use per week."),
    weeks: float = typer.Option(4, help="For how many weeks."),
    predictability: float = typer.Option(1.0, help="1 = exactly as planned; 0.5 = usage may halve."),
    gpus: int = typer.Option(1, "--gpus", "--count", help="GPUs rented together."),
    price: str = typer.Option(None, help="Hourly price per GPU to use instead of the catalog's."),
    currency: str = typer.Option("USD", help="Currency of --price."),
    discount: list[str] = typer.Option(
        None, "--discount", help="What-if TERM=PCT, e.g. package-month=30 (repeatable); default: the server's terms."
    ),
    include_outliers: bool = OUTLIERS_OPT,
    as_json: bool = JsonOpt,
) -> None:
    """Cheapest of hourly and the packages and reservations on sale (with DANLU_URL: this platform's
    prices and terms; else the public catalog and --discount what-ifs), with break-even points."""
    discounts: dict[str, str] = {}
    for item in discount or []:
        term, sep, pct = item.partition("=")
        if not sep:
            fail(f"--discount takes TERM=PCT, e.g. package-month=30, not {item!r}", "invalid_discount")
        discounts[term.strip()] = pct.strip().rstrip("%")
    url = os.environ.get("DANLU_URL")
    try:
        profile = UsageProfile(hours_per_day, days_per_week, weeks, predictability)
        if url and price is None:
            body = {
                "gpu": gpu,
                "hours_per_day": hours_per_day,
                "days_per_week": days_per_week,
                "weeks": weeks,
                "predictability": predictability,
                "gpus": gpus,
                "discounts_pct": {k: float(v) for k, v in discounts.items()},
            }
            if include_outliers:
                body["include_outliers"] = True
            out = _remote(body, url, "/advice/plan")
            _source(f"server {url}")
        else:
            rate = Decimal(price) if price else None
            out = service.plan_advice(
                gpu,
                profile,
                gpus=gpus,
                rate=rate,
                currency=currency,
                discounts={k: Decimal(v) for k, v in discounts.items()},
                include_outliers=include_outliers,
            )
    except DanluError as exc:
        fail(exc.message, exc.code)
    except (ArithmeticError, ValueError):
        fail(f"--price {price!r} and --discount percentages are decimals such as 1.99", "invalid_amount")
    if as_json:
        print_json(out)
        return
    print_table(
        out["plans"],
        [("plan", "plan"), ("cost", f"cost ({out['currency']})"), ("note", "")],
        title=f"{gpu} at {out['hourly_rate']} {out['currency']}/GPU-h ({out['rate_source']})",
    )
    for line in [f"cheapest: {out['best']}", *out["break_even"], f"package discounts: {out['discount_source']}"]:
        typer.echo(line)


@advise_app.command("buy")
def advise_buy(
    gpu: str = typer.Option(..., help="GPU model to buy (power from its TDP)."),
    purchase_price: str = typer.Option(..., help="Purchase price of one GPU (and its share of the server)."),
    currency: str = typer.Option("USD"),
    rent_rate: str = typer.Option(None, help="Rent price per GPU-hour (default: cheapest known)."),
    kwh_price: str = typer.Option("0.15", help="Electricity price per kWh."),
    pue: str = typer.Option("1.5", help="Power usage effectiveness of the room."),
    years: int = typer.Option(3, help="Depreciation years."),
    resale_pct: str = typer.Option("20", help="Resale value at the end, % of purchase."),
    utilisation: str = typer.Option("0.5", help="Fraction of hours the GPU does useful work."),
    hosting_per_month: str = typer.Option("0", help="Hosting cost per month."),
    svg: Path = typer.Option(None, help="Also write the cumulative-cost chart as SVG here."),
    include_outliers: bool = OUTLIERS_OPT,
    as_json: bool = JsonOpt,
) -> None:
    """Total cost of owning vs renting the same useful GPU-hours; break-even utilisation; chart."""
    try:
        res = service.buy_advice(
            gpu,
            purchase_price=purchase_price,
            currency=currency,
            rent_rate=Decimal(rent_rate) if rent_rate else None,
            kwh_price=Decimal(kwh_price),
            pue=Decimal(pue),
            years=years,
            resale_pct=Decimal(resale_pct),
            utilisation=Decimal(utilisation),
            hosting_per_month=hosting_per_month,
            include_outliers=include_outliers,
        )
    except DanluError as exc:
        fail(exc.message, exc.code)
    except ArithmeticError:
        fail(
            "rates (--rent-rate, --kwh-price, --pue, --resale-pct, --utilisation) must be decimals",
            "invalid_amount",
        )
    series = {"buy": res.buy_cumulative_minor, "rent": res.rent_cumulative_minor}
    if svg is not None:
        svg.write_text(
            svg_chart(series, title=f"{gpu}: cumulative cost, buy vs rent", unit=res.currency),
            encoding="utf-8",
        )
    out = res.to_dict()
    if as_json:
        print_json(out)
        return
    typer.echo(f"rent rate: {out['rent_rate']} {res.currency}/GPU-h ({out['rent_rate_source']})")
    typer.echo(text_chart(series, unit=res.currency))
    be = res.break_even_utilisation
    typer.echo(
        f"over {res.months} months: buy {out['total_buy']} vs rent {out['total_rent']} {res.currency}; "
        f"cheaper: {res.cheaper}; break-even utilisation: "
        + ("never (power alone costs more than renting)" if be is None else f"{be:.0%}")
    )


def compare(
    gpu: str = typer.Option(..., help="GPU model or family, e.g. A100."),
    count: int = typer.Option(1, "--count", "--gpus", help="GPUs needed, on one machine (see --multi-machine)."),
    hours: float = typer.Option(1.0, help="Hours of use."),
    spot: bool = typer.Option(False, "--spot", help="Spot/interruptible prices only."),
    multi_machine: bool = typer.Option(
        False, "--multi-machine", help="Also several smaller instances (default: all GPUs on one machine)."
    ),
    include_outliers: bool = OUTLIERS_OPT,
    as_json: bool = JsonOpt,
) -> None:
    """Rank public providers for a GPU from the bundled, dated price catalog (offline): the newest
    price of each instance, with its source and date; outlier prices only with --include-outliers."""
    try:
        rows = service.compare(
            gpu, hours=hours, count=count, spot=spot, multi_machine=multi_machine, include_outliers=include_outliers
        )
        cat = price_catalog()
        left_out = 0 if include_outliers else len(service.outlier_rows(gpu))
    except DanluError as exc:
        fail(exc.message, exc.code)
    if as_json:
        print_json(rows)
        return
    flag = [("flag", "flag")] if any(r["outlier"] for r in rows[:30]) else []
    print_table(
        [{**r, "flag": "OUTLIER" if r["outlier"] else "", "region": _regions(r["regions"])} for r in rows[:30]],
        [
            ("provider", "provider"),
            ("region", "region"),
            ("gpu_model", "GPU"),
            ("instance_type", "instance"),
            ("machines", "machines"),
            ("gpus_billed", "GPUs billed"),
            ("price_per_hour", "per hour"),
            ("total", "total"),
            ("currency", "cur"),
            ("as_of", "as of"),
            ("source_label", "source"),
            *flag,
        ],
        title=f"{gpu} × {count} for {hours:g} h ({len(rows)} offers)",
    )
    typer.echo(
        f"catalog: {cat.origin}, snapshot {cat.snapshot}; oldest price in use {cat.age_days(_today())} days old; "
        "older prices of the same instance are superseded",
        err=True,
    )
    _outlier_note(left_out)


@prices_app.command("info")
def prices_info(as_json: bool = JsonOpt) -> None:
    """Where the price catalog comes from and how old it is."""
    cat = price_catalog()
    info = {
        "origin": cat.origin,
        "snapshot": cat.snapshot.isoformat(),
        "rows": len(cat.rows),
        "rows_superseded": sum(r.superseded for r in cat.rows),
        "rows_outlier": sum(r.outlier for r in cat.rows),
        "oldest_price": min(r.as_of for r in cat.usable(True)).isoformat(),
        "age_days": cat.age_days(_today()),
        "providers": sorted({r.provider for r in cat.rows}),
        "attribution": cat.attribution,
    }
    if as_json:
        print_json(info)
        return
    for k, v in info.items():
        typer.echo(f"{k}: {', '.join(v) if isinstance(v, list) else v}")


@prices_app.command("import")
def prices_import(path: Path = typer.Argument(..., help="A CSV in the bundled catalog's format.")) -> None:
    """Validate a newer price CSV and use it instead of the bundled snapshot."""
    try:
        cat = import_catalog(path)
    except DanluError as exc:
        fail(exc.message, exc.code)
    typer.echo(f"imported {len(cat.rows)} rows, snapshot {cat.snapshot}, now in use from {cat.origin}")


def register(app: typer.Typer) -> None:
    app.add_typer(advise_app, name="advise")
    app.command("compare")(compare)
    app.add_typer(prices_app, name="prices")


def _regions(regions: list[str]) -> str:
    """ "europe-central-1 (+16 more)" for an instance sold at one price in several regions."""
    return regions[0] if len(regions) == 1 else f"{regions[0]} (+{len(regions) - 1} more)"
