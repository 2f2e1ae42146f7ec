"""The HTML cost report: one self-contained file (plotly.js inline, no network at view time) with
the charts a person would rather look at than read — cost over time by team, spot savings against
on-demand, preemption waste, idle waste, forecast vs actual — and the table.

Names in it (teams, jobs, pools, policies) are Kubernetes names, already limited to
``[a-z0-9.-]``; they are HTML-escaped in the table and reduced to that alphabet in the charts, so
no tenant text can open a tag or end a script.
"""

from __future__ import annotations

import datetime as dt
import html
import re
from typing import Any

from accel_api.costrollup import CostRollup
from accel_operator.accounting import costreport
from accel_operator.accounting.costreport import By, JobCost, Row
from accel_operator.cli.errors import UsageError

_UNSAFE = re.compile(r"[^A-Za-z0-9._/-]")


def _safe(text: str) -> str:
    return _UNSAFE.sub("_", text)[:80]


def render(
    jobs: list[JobCost],
    rows: list[Row],
    by: By,
    window: tuple[dt.datetime, dt.datetime],
    budgets: list[dict[str, Any]],
    *,
    folded: CostRollup | None = None,
) -> str:
    start, end = window
    try:
        import plotly.graph_objects as go
        from plotly.offline import get_plotlyjs
    except ImportError as exc:
        raise UsageError("-o html needs plotly: pip install 'accel-operator[report]'") from exc

    charts: list[tuple[str, Any]] = []
    days = costreport.daily(jobs, start, end, folded)
    over_time = go.Figure()
    for team in sorted(days):
        points = sorted(days[team].items())
        over_time.add_bar(
            name=_safe(team), x=[d.isoformat() for d, _ in points], y=[round(t.spent_usd, 2) for _, t in points]
        )
    over_time.update_layout(barmode="stack", yaxis_title="USD per day", xaxis_title="day (UTC)")
    charts.append(("Cost over time by team", over_time))

    teams = costreport.rows(jobs, By.TEAM, start, end, folded)
    names = [_safe(r.key) for r in teams]
    savings = go.Figure()
    savings.add_bar(name="spent", x=names, y=[round(r.totals.spent_usd, 2) for r in teams])
    savings.add_bar(name="same device-hours on demand", x=names, y=[round(r.totals.on_demand_usd, 2) for r in teams])
    savings.update_layout(barmode="group", yaxis_title="USD")
    charts.append(("Spot savings against on-demand", savings))

    waste = go.Figure()
    waste.add_bar(name="lost to preemption", x=names, y=[round(r.totals.lost_to_preemption_usd, 2) for r in teams])
    waste.add_bar(
        name="other spending",
        x=names,
        y=[round(r.totals.spent_usd - r.totals.lost_to_preemption_usd, 2) for r in teams],
    )
    waste.update_layout(barmode="stack", yaxis_title="USD")
    charts.append(("Preemption waste (work done again after a resume)", waste))

    idle = go.Figure()
    idle.add_bar(name="idle devices", x=names, y=[round(r.totals.idle_usd, 2) for r in teams])
    idle.add_bar(name="busy devices", x=names, y=[round(r.totals.spent_usd - r.totals.idle_usd, 2) for r in teams])
    idle.update_layout(barmode="stack", yaxis_title="USD")
    charts.append(("Idle waste (allocated devices node reports showed at ~0%)", idle))

    per_job = costreport.rows(jobs, By.JOB, start, end, folded)[:50]
    forecast = go.Figure()
    job_names = [_safe(r.key) for r in per_job]
    forecast.add_bar(name="forecast", x=job_names, y=[round(r.forecast_usd, 2) for r in per_job])
    forecast.add_bar(name="actual", x=job_names, y=[round(r.totals.spent_usd, 2) for r in per_job])
    forecast.update_layout(barmode="group", yaxis_title="USD")
    charts.append(("Forecast vs actual (the 50 costliest jobs)", forecast))

    sections = []
    for k, (title, fig) in enumerate(charts):
        fig.update_layout(margin={"t": 30, "b": 40}, height=360, template="plotly_white")
        body = fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"chart{k}", config={"responsive": True})
        sections.append(f"<section><h2>{html.escape(title)}</h2>{body}</section>")
    head = f"<script>{get_plotlyjs()}</script>"
    return _page(
        head, "".join(sections), _table(rows, by), f"{start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC", budgets
    )


def _table(rows: list[Row], by: By) -> str:
    heads = ["spent", "lost (preemption)", "idle", "on demand", "spot saved", "forecast", "device-hours", "jobs"]
    cells = []
    for r in rows:
        d = r.as_dict()
        money = "".join(f"<td>${float(d[k]):,.2f}</td>" for k in costreport.COLUMNS[1:7])
        cells.append(
            f"<tr><th>{html.escape(str(d['key']))}</th>{money}<td>{float(d['deviceHours']):,.2f}</td>"
            f"<td>{int(d['jobs'])}</td></tr>"
        )
    head = "".join(f"<th>{h}</th>" for h in heads)
    return f"<table><tr><th>{by.value}</th>{head}</tr>{''.join(cells)}</table>"


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


# Nothing may be fetched: scripts, styles, images and fonts only from the page itself.
_CSP = (
    "default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; "
    "img-src data:; font-src data:"
)


def _page(head: str, sections: str, table: str, window: str, budgets: list[dict[str, Any]]) -> str:
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<title>Accelerator cost report</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border-bottom: 1px solid #ddd; padding: 4px 10px; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
section {{ margin-top: 2em; }}
</style>
{head}
</head><body>
<h1>Accelerator cost report</h1>
<p>{html.escape(window)}. Spent is what devices cost while held (devices × seconds × the price in force);
lost to preemption and idle are parts of it; on demand is what the same device-hours would have cost on demand.</p>
{table}
<h2>Budgets (current period)</h2>
{_budgets(budgets)}
{sections}
</body></html>
"""
