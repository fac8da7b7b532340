"""An instance's usage chart as a self-contained SVG (``danlu show ID --chart FILE.svg``): GPU
utilisation per GPU and the run's CPU over time, 0-100 %, with the time axis in the viewer's local
time (or ``tz``: the console passes the deployment's zone). Pure: it takes the JSON of
``GET /instances/{id}/metrics`` and returns the SVG text; no plotting library."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, tzinfo
from html import escape
from typing import Any

W, H = 900, 360
LEFT, RIGHT, TOP, BOTTOM = 56, 170, 40, 48
COLOURS = ["#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]
CPU_COLOUR = "#7f7f7f"


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def _line(points: list[tuple[int, float]], x0: int, x1: int, colour: str, dash: str = "") -> str:
    span = max(1, x1 - x0)
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM
    coords = " ".join(
        f"{LEFT + (t - x0) * plot_w / span:.1f},{TOP + plot_h - min(100.0, max(0.0, v)) * plot_h / 100:.1f}"
        for t, v in points
    )
    extra = f' stroke-dasharray="{dash}"' if dash else ""
    return f'<polyline fill="none" stroke="{colour}" stroke-width="1.6"{extra} points="{coords}"/>'


def render_svg(
    metrics: dict[str, Any], title: str = "", tz: tzinfo | None = None, tr: Callable[[str], str] = str
) -> str:
    """The chart of one instance's metrics (the API's JSON); an empty chart says there is no data. ``tr``
    translates its words (the console passes the page's gettext; console/words.py lists them)."""
    x0, x1 = _ms(metrics["since"]), _ms(metrics["until"])
    series: list[tuple[str, str, list[tuple[int, float]], str]] = []
    for i, g in enumerate(metrics.get("gpus", [])):
        pts = [(_ms(p["at"]), float(p["util_pct"])) for p in g["points"] if p.get("util_pct") is not None]
        label = f"GPU {g['gpu_index']}" + (f" ({tr('simulated')})" if g.get("simulated") else "")
        series.append((label, COLOURS[i % len(COLOURS)], pts, ""))
    run = metrics.get("run") or {}
    cpu = [(_ms(p["at"]), float(p["util_pct"])) for p in run.get("points", []) if p.get("util_pct") is not None]
    series.append((tr("CPU of its cores"), CPU_COLOUR, cpu, "4 3"))
    if any(pts for _, _, pts, _ in series):
        x0 = min(x0, *(pts[0][0] for _, _, pts, _ in series if pts))
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="{W}" height="{H}" fill="white"/>',
        f'<text x="{LEFT}" y="22" font-size="15">{escape(title or metrics["instance_id"])}: '
        f"{escape(tr('utilisation %'))}</text>",
    ]
    for pct in (0, 25, 50, 75, 100):
        y = TOP + plot_h - pct * plot_h / 100
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + plot_w}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{LEFT - 8}" y="{y + 4:.1f}" text-anchor="end">{pct}%</text>')
    for k in range(5):
        t = x0 + (x1 - x0) * k // 4
        x = LEFT + plot_w * k / 4
        stamp = datetime.fromtimestamp(t / 1000).astimezone(tz).strftime("%m-%d %H:%M")
        out.append(f'<text x="{x:.1f}" y="{H - BOTTOM + 18}" text-anchor="middle">{stamp}</text>')
    zone = tr("local") if tz is None else str(tz)
    out.append(
        f'<text x="{LEFT + plot_w / 2:.1f}" y="{H - 10}" text-anchor="middle">{escape(tr("time"))} ({zone})</text>'
    )
    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>')
    drawn = 0
    for n, (label, colour, pts, dash) in enumerate(series):
        if len(pts) >= 2:
            out.append(_line(pts, x0, x1, colour, dash))
            drawn += 1
        elif len(pts) == 1:
            out.append(_line([pts[0], (x1, pts[0][1])], x0, x1, colour, dash))
            drawn += 1
        y = TOP + 14 + n * 18
        out.append(f'<line x1="{W - RIGHT + 12}" y1="{y - 4}" x2="{W - RIGHT + 32}" y2="{y - 4}" stroke="{colour}" '
                   f'stroke-width="2"{f" stroke-dasharray={chr(34)}{dash}{chr(34)}" if dash else ""}/>')  # fmt: skip
        out.append(f'<text x="{W - RIGHT + 38}" y="{y}">{escape(label)}</text>')
    if not drawn:
        out.append(
            f'<text x="{LEFT + plot_w / 2:.1f}" y="{TOP + plot_h / 2:.1f}" text-anchor="middle" fill="#666">'
            + escape(tr("no samples in this period (an instance is sampled while it runs)"))
            + "</text>"
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"
