"""Bar charts as plain SVG, drawn here: the HTML cost report's charts, with no script and no
library in the page (plotly.js inline made the report 4.85 MB; these charts are a few KiB each).

One colour per meaning in every chart (:data:`MEANING`); teams get their own palette
(:data:`TEAMS`), which shares no colour with the meanings. Text is escaped; the names the report
passes are Kubernetes names reduced to a safe alphabet already. Each bar carries a ``<title>``
(the browser shows it on hover) with its series, category and value.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

MEANING: Final = {
    "spent": "#2563eb",
    "lost": "#dc2626",
    "idle": "#f59e0b",
    "saved": "#16a34a",
    "on demand": "#9ca3af",
    "forecast": "#7c3aed",
}
TEAMS: Final = ("#0d9488", "#92400e", "#db2777", "#0891b2", "#4338ca", "#a21caf", "#4d7c0f", "#334155")

WIDTH, HEIGHT = 960, 340
LEFT, RIGHT, TOP, BOTTOM = 90, 16, 20, 80
LEGEND_ROW = 20  # the legend wraps into rows above the plot; the chart grows by them


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    colour: str
    values: Sequence[float]


def bars(
    chart_id: str,
    categories: Sequence[str],
    series: Sequence[Series],
    *,
    stacked: bool,
    y_title: str,
    x_title: str = "",
    log: bool = False,
    money: bool = True,
    empty: str = "no spending in this window",
) -> str:
    """An SVG bar chart: one band per category, the series stacked or side by side; ``log``: a
    logarithmic value axis (bars of 0 are not drawn); ``empty``: what an empty chart says."""
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    legend, rows = _legend(series)
    extra = rows * LEGEND_ROW
    parts = [
        f'<svg class="chart" id="{chart_id}" viewBox="0 0 {WIDTH} {HEIGHT + extra}" width="{WIDTH}" '
        f'height="{HEIGHT + extra}" role="img" font-family="system-ui, sans-serif" font-size="12">',
        legend,
        f'<g transform="translate(0 {extra})">',  # the plot, below the legend
    ]
    n = len(categories)
    tops = [
        sum(s.values[i] for s in series) if stacked else max((s.values[i] for s in series), default=0.0)
        for i in range(n)
    ]
    top = max(tops, default=0.0)
    if n == 0 or top <= 0:
        parts.append(f'<text x="{LEFT + pw / 2}" y="{TOP + ph / 2}" text-anchor="middle">{html.escape(empty)}</text>')
        parts.append("</g></svg>")
        return "".join(parts)
    scale, ticks = _log_axis(series) if log else _linear_axis(top)
    for value in ticks:
        y = TOP + ph - scale(value) * ph
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e7eb"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(value, money)}</text>')
    parts.append(
        f'<text transform="translate(16 {TOP + ph / 2}) rotate(-90)" text-anchor="middle">{html.escape(y_title)}</text>'
    )
    band = pw / n
    for i, cat in enumerate(categories):
        x0 = LEFT + i * band
        if stacked:
            base = 0.0
            for s in series:
                v = s.values[i]
                if v > 0:
                    y1, y0 = scale(base + v), scale(base)
                    parts.append(_bar(x0 + band * 0.15, band * 0.7, (y0, y1), s, cat, v=v, money=money))
                base += v
        else:
            w = band * 0.8 / len(series)
            for k, s in enumerate(series):
                v = s.values[i]
                if v > 0 and (not log or scale(v) > 0):
                    parts.append(_bar(x0 + band * 0.1 + k * w, w, (0.0, scale(v)), s, cat, v=v, money=money))
    parts.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{TOP + ph}" y2="{TOP + ph}" stroke="#6b7280"/>')
    every = max(1, math.ceil(n / 24))  # at most 24 labels under the axis
    for i, cat in enumerate(categories):
        if i % every:
            continue
        x = LEFT + (i + 0.5) * band
        parts.append(
            f'<text transform="translate({x:.1f} {TOP + ph + 12}) rotate(-35)" text-anchor="end">'
            f"{html.escape(cat[:40])}</text>"
        )
    if x_title:
        parts.append(f'<text x="{LEFT + pw / 2}" y="{HEIGHT - 4}" text-anchor="middle">{html.escape(x_title)}</text>')
    parts.append("</g></svg>")
    return "".join(parts)


def _bar(x: float, w: float, y: tuple[float, float], s: Series, cat: str, *, v: float, money: bool) -> str:
    ph = HEIGHT - TOP - BOTTOM
    y0, y1 = y  # the bar's bottom and top, as fractions of the plot's height
    top, height = TOP + ph - y1 * ph, max(0.5, (y1 - y0) * ph)
    label = html.escape(f"{s.name}, {cat}: " + (f"${v:,.2f}" if money else f"{v:,.2f}"))
    return (
        f'<rect class="bar" data-series="{html.escape(s.name)}" x="{x:.1f}" y="{top:.1f}" width="{max(w, 1):.1f}" '
        f'height="{height:.1f}" fill="{s.colour}"><title>{label}</title></rect>'
    )


def _legend(series: Sequence[Series]) -> tuple[str, int]:
    """The legend, wrapped into rows as wide as the chart, and how many rows it took."""
    out, x, row = [], LEFT, 0
    for s in series:
        width = 28 + 7 * len(s.name)
        if x > LEFT and x + width > WIDTH - RIGHT:
            x, row = LEFT, row + 1
        y = 4 + row * LEGEND_ROW
        out.append(f'<rect x="{x}" y="{y}" width="12" height="12" fill="{s.colour}"/>')
        out.append(f'<text x="{x + 16}" y="{y + 10}">{html.escape(s.name)}</text>')
        x += width
    return "".join(out), row + 1


def _nice(x: float) -> float:
    exp = 10.0 ** math.floor(math.log10(x))
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        if m * exp >= x:
            return m * exp
    return 10.0 * exp


def _linear_axis(top: float) -> tuple[Callable[[float], float], list[float]]:
    step = _nice(top / 5)
    high = step * math.ceil(top / step)
    ticks = [step * k for k in range(round(high / step) + 1)]

    def scale(v: float) -> float:
        return v / high

    return scale, ticks


def _log_axis(series: Sequence[Series]) -> tuple[Callable[[float], float], list[float]]:
    positive = [v for s in series for v in s.values if v > 0]
    lo = 10.0 ** math.floor(math.log10(min(positive)))
    hi = 10.0 ** math.ceil(math.log10(max(positive)))
    if hi <= lo:
        hi = lo * 10
    span = math.log10(hi) - math.log10(lo)
    # A bar starts at the lowest decade (log scales have no zero).
    ticks = [lo * 10**k for k in range(round(span) + 1)]

    def scale(v: float) -> float:
        return (math.log10(v) - math.log10(lo)) / span if v > 0 else 0.0

    return scale, ticks


def _fmt(v: float, money: bool) -> str:
    if money and v >= 1e6:
        return f"${v / 1e6:,.1f}M"
    if money and v >= 1e4:
        return f"${v / 1e3:,.0f}k"
    if money:
        return f"${v:,.0f}" if v >= 100 else f"${v:,.2f}"
    return f"{v:,.2f}"
