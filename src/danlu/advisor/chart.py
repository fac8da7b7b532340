"""Cumulative-cost charts drawn by hand: a terminal chart and a standalone SVG (no plotting library)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from xml.sax.saxutils import escape

MARKS = "*o+x"
COLOURS = ("#d62728", "#1f77b4", "#2ca02c", "#9467bd")


def text_chart(series: Mapping[str, Sequence[int]], *, width: int = 60, height: int = 14, unit: str = "") -> str:
    """Plot each series (same length, values in minor units) against its index (month)."""
    n = max(len(v) for v in series.values())
    top = max(max(v) for v in series.values()) or 1
    grid = [[" "] * width for _ in range(height)]
    for mark, values in zip(MARKS, series.values(), strict=False):
        for i, v in enumerate(values):
            x = round(i * (width - 1) / max(1, n - 1))
            y = height - 1 - round(max(0, v) * (height - 1) / top)
            grid[y][x] = mark
    label_w = len(f"{top / 100:,.0f}")
    lines = []
    for row_i, row in enumerate(grid):
        label = f"{top / 100:,.0f}" if row_i == 0 else ("0" if row_i == height - 1 else "")
        lines.append(f"{label:>{label_w}} |" + "".join(row))
    lines.append(" " * label_w + " +" + "-" * width)
    lines.append(" " * label_w + f"  month 0{' ' * (width - 14)}month {n - 1}")
    legend = "   ".join(f"{m} {name}" for m, name in zip(MARKS, series, strict=False))
    lines.append(" " * label_w + f"  {legend}" + (f"   ({unit})" if unit else ""))
    return "\n".join(lines)


def svg_chart(
    series: Mapping[str, Sequence[int]], *, title: str, unit: str, width: int = 640, height: int = 360
) -> str:
    """A self-contained SVG line chart; values are minor units, labelled in major units."""
    pad_l, pad_r, pad_t, pad_b = 70, 20, 40, 40
    n = max(len(v) for v in series.values())
    top = max(max(v) for v in series.values()) or 1
    pw, ph = width - pad_l - pad_r, height - pad_t - pad_b

    def xy(i: int, v: int) -> str:
        return f"{pad_l + i * pw / max(1, n - 1):.1f},{pad_t + ph - max(0, v) * ph / top:.1f}"

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
        'font-size="12">',
        f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>',
        f'<line x1="{pad_l}" y1="{pad_t + ph}" x2="{pad_l + pw}" y2="{pad_t + ph}" stroke="black"/>',
        f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{pad_t + ph}" stroke="black"/>',
        f'<text x="{pad_l - 5}" y="{pad_t + 4}" text-anchor="end">{top / 100:,.0f}</text>',
        f'<text x="{pad_l - 5}" y="{pad_t + ph}" text-anchor="end">0</text>',
        f'<text x="{pad_l + pw / 2}" y="{height - 8}" text-anchor="middle">month (0–{n - 1}); {escape(unit)}</text>',
    ]
    for k, (name, values) in enumerate(series.items()):
        colour = COLOURS[k % len(COLOURS)]
        points = " ".join(xy(i, v) for i, v in enumerate(values))
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{points}"/>')
        parts.append(f'<text x="{pad_l + 10}" y="{pad_t + 16 + 16 * k}" fill="{colour}">{escape(name)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
