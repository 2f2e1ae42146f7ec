"""The HTML cost report: one self-contained file (no script, nothing fetched at view time) with the
period and currency, the table with its totals row, where every price came from, the budgets,
and the charts a person would rather look at than read — cost over time by team (per hour for a
window of up to two days, else per day), spot savings against on-demand, preemption waste, idle
waste, forecast against spending to date for the whole job (log scale) — drawn as SVG by
:mod:`accel_operator.cli.svgchart`, one colour per meaning across them.

Names in it (teams, jobs, pools, policies) are Kubernetes names, already limited to
``[a-z0-9.-]``; they are HTML-escaped in the tables and reduced to that alphabet in the charts, so
no tenant text can open a tag.
"""

from __future__ import annotations

import datetime as dt
import html
import re
from typing import Any

from accel_operator.accounting import costreport
from accel_operator.accounting.costreport import By, Row
from accel_operator.accounting.ledger import Figures
from accel_operator.accounting.pricesources import CURRENCY, PriceLine
from accel_operator.accounting.report import Report
from accel_operator.cli.svgchart import MEANING, TEAMS, Series, bars

_UNSAFE = re.compile(r"[^A-Za-z0-9._/-]")
TEAMS_SHOWN = len(TEAMS) - 1  # beyond it, the rest of the teams share one bar: "other teams"
JOBS_SHOWN = 50


def _safe(text: str) -> str:
    return _UNSAFE.sub("_", text)[:80]


def render(report: Report) -> str:
    start, end = report.window
    jobs, folded = report.jobs, report.folded
    charts: list[tuple[str, str]] = []

    step, per_team = costreport.over_time(jobs, start, end, folded)
    hourly = step < dt.timedelta(days=1)
    slots: list[dt.datetime] = []
    at = costreport.floor(start, step)  # the same bucketing as the figures
    while at < end:
        slots.append(at)
        at += step
    spent = {team: sum(f.spent_usd for f in days.values()) for team, days in per_team.items()}
    ranked = sorted(per_team, key=lambda t: (-spent[t], t))
    shown, rest = ranked[:TEAMS_SHOWN], ranked[TEAMS_SHOWN:]
    series = [
        Series(_safe(team), TEAMS[k], [round(per_team[team].get(s, _ZERO).spent_usd, 4) for s in slots])
        for k, team in enumerate(shown)
    ]
    if rest:
        series.append(
            Series(
                f"{len(rest)} other teams",
                TEAMS[-1],
                [round(sum(per_team[t].get(s, _ZERO).spent_usd for t in rest), 4) for s in slots],
            )
        )
    labels = [s.strftime("%m-%d %H:00") if hourly else s.strftime("%Y-%m-%d") for s in slots]
    unit = "hour" if hourly else "day"
    charts.append(
        (
            f"Cost over time by team (USD per {unit}, UTC)",
            bars("chart0", labels, series, stacked=True, y_title=f"USD per {unit}", x_title=f"{unit} (UTC)"),
        )
    )

    teams = costreport.rows(jobs, By.TEAM, start, end, folded)
    names = [_safe(r.key) for r in teams]
    charts.append(
        (
            "Spot savings: what was spent, and what the same device-hours on demand would have cost more",
            bars(
                "chart1",
                names,
                [
                    Series("spent", MEANING["spent"], [r.totals.spent_usd for r in teams]),
                    Series("saved against on demand", MEANING["saved"], [r.savings_usd for r in teams]),
                ],
                stacked=True,
                y_title="USD (bar height: on-demand equivalent)",
            ),
        )
    )
    charts.append(
        (
            "Preemption waste (work done again after a resume), part of what was spent",
            bars(
                "chart2",
                names,
                [
                    Series("lost to preemption", MEANING["lost"], [r.totals.lost_to_preemption_usd for r in teams]),
                    Series(
                        "spent", MEANING["spent"], [r.totals.spent_usd - r.totals.lost_to_preemption_usd for r in teams]
                    ),
                ],
                stacked=True,
                y_title="USD",
            ),
        )
    )
    charts.append(
        (
            "Idle waste (allocated devices node reports showed at ~0%), part of what was spent",
            bars(
                "chart3",
                names,
                [
                    Series("idle", MEANING["idle"], [r.totals.idle_usd for r in teams]),
                    Series("spent", MEANING["spent"], [r.totals.spent_usd - r.totals.idle_usd for r in teams]),
                ],
                stacked=True,
                y_title="USD",
            ),
        )
    )
    per_job = costreport.rows(jobs, By.JOB, start, end, folded)[:JOBS_SHOWN]
    charts.append(
        (
            f"Forecast for the whole job against its spending to date (the {JOBS_SHOWN} costliest jobs in the "
            "window; log scale: a forecast many times the spending does not flatten the rest)",
            bars(
                "chart4",
                [_safe(r.key) for r in per_job],
                [
                    Series("forecast for the whole job", MEANING["forecast"], [r.forecast_usd for r in per_job]),
                    Series("spent to date", MEANING["spent"], [r.spent_to_date_usd for r in per_job]),
                ],
                stacked=False,
                log=True,
                y_title="USD, log scale",
            ),
        )
    )
    sections = "".join(f"<section><h2>{html.escape(title)}</h2>{svg}</section>" for title, svg in charts)
    return _page(report, sections)


_ZERO = Figures()


def _table(rows: list[Row], total: Row, by: By) -> str:
    heads = [
        "spent",
        "lost (preemption)",
        "idle",
        "on demand",
        "spot saved",
        "device-hours",
        "jobs",
        "spent to date (whole job)*",
        "forecast for the whole job*",
    ]

    def cells(r: Row, tag: str, cls: str) -> str:
        d = r.as_dict()
        window = "".join(f"<td>${float(d[k]):,.2f}</td>" for k in costreport.WINDOW_MONEY)
        whole = "".join(f"<td>${float(d[k]):,.2f}</td>" for k in costreport.WHOLE_JOB_MONEY)
        return (
            f'<tr class="{cls}"><{tag}>{html.escape(str(d["key"]))}</{tag}>{window}'
            f"<td>{float(d['deviceHours']):,.2f}</td><td>{int(d['jobs'])}</td>{whole}</tr>"
        )

    body = "".join(cells(r, "th", "row") for r in rows)
    if rows:
        body += cells(total, "th", "total")
    head = "".join(f"<th>{h}</th>" for h in heads)
    return f'<table class="rows"><thead><tr><th>{by.value}</th>{head}</tr></thead><tbody>{body}</tbody></table>'


def _prices(prices: list[PriceLine]) -> str:
    if not prices:
        return "<p>No spending in this window: no prices used.</p>"

    def span(p: PriceLine) -> str:
        if p.low is None or p.high is None:
            return "-"
        return f"${p.low:,.4f}" if p.low == p.high else f"${p.low:,.4f} to ${p.high:,.4f}"

    rows = "".join(
        "<tr>"
        f"<td>{html.escape(p.pool)}</td><td>{html.escape(p.capacity_type.value)}</td>"
        f"<td>{html.escape(p.accelerator or '?')}</td><td>{span(p)}</td><td>{html.escape(p.kind)}</td>"
        f"<td>{html.escape(p.source)}</td><td>{html.escape(p.as_of)}</td>"
        f"<td>{html.escape(p.on_demand_source)}; as of {html.escape(p.on_demand_as_of)}</td>"
        "</tr>"
        for p in prices
    )
    return (
        '<table class="prices"><thead><tr><th>pool</th><th>capacity</th><th>accelerator</th>'
        "<th>USD per device-hour</th><th>kind</th><th>source</th><th>as of</th>"
        "<th>on-demand figure (for on demand and spot saved)</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


def _budgets(budgets: list[dict[str, Any]]) -> str:
    if not budgets:
        return "<p>No budgets (AcceleratorPolicy spec.budgets) in the cluster.</p>"
    rows = "".join(
        "<tr>"
        f"<td>{html.escape(str(b.get('policy', '')))}</td><td>{html.escape(str(b.get('team', '')))}</td>"
        f"<td>{html.escape(str(b.get('period', '')))}</td><td>${float(b.get('spentUsd', 0)):,.2f}</td>"
        f"<td>${float(b.get('limitUsd', 0)):,.2f}</td><td>{100 * float(b.get('usedFraction') or 0):.1f}%</td>"
        "</tr>"
        for b in budgets
    )
    return (
        "<table><tr><th>policy</th><th>team</th><th>period</th><th>spent</th><th>limit</th><th>used</th></tr>"
        f"{rows}</table>"
    )


# Nothing may be fetched or run: no script at all, styles and images only from the page itself.
_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
# The colours of the totals row and of the price table's header: a screenshot test finds them.
TOTAL_BACKGROUND = "#fef3c7"
PRICES_BACKGROUND = "#e0f2fe"


def _page(report: Report, sections: str) -> str:
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<title>Accelerator cost report</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border-bottom: 1px solid #ddd; padding: 4px 10px; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
tr.total {{ background: {TOTAL_BACKGROUND}; font-weight: bold; }}
table.prices thead tr {{ background: {PRICES_BACKGROUND}; }}
table.prices td, table.prices th {{ text-align: left; }}
section {{ margin-top: 2em; }}
</style>
</head><body>
<h1>Accelerator cost report</h1>
<p class="period">{html.escape(report.period())}.</p>
<p>Spent is what devices cost while held in the window (devices × seconds × the price in force);
lost to preemption and idle are parts of it; on demand is what the same device-hours would have cost
on demand. All figures in {CURRENCY}.</p>
{_table(report.rows, report.total, report.by)}
<p>* {html.escape(costreport.WHOLE_JOB_NOTE)}</p>
<h2>Prices used</h2>
{_prices(report.prices)}
<h2>Budgets (current period)</h2>
{_budgets(report.budgets)}
{sections}
</body></html>
"""
