"""``accelctl simulate -o html``: the strategies side by side on one self-contained page.

No script and no external resource (the same Content-Security-Policy as the cost report): the
figures' table, then bar charts drawn by :mod:`.svgchart` (the cost report's): cost per team,
cost with what was lost to preemption and paid for idle, the deadline hit rate, the queueing
delay percentiles, and the cost over time (the ledger's total at the end of each day). Every
name on the page (teams, strategies, the trace's path) is escaped, and in the charts reduced to
a safe alphabet as well.
"""

from __future__ import annotations

import html
import math
import re
from typing import Any

from accel_operator.cli.svgchart import MEANING, TEAMS, Series, bars
from accel_operator.simulate import figures

_UNSAFE = re.compile(r"[^A-Za-z0-9._+/-]")
_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
MAX_DAYS = 400  # bars of the cost over time (a year of trace, and some)


def _safe(text: str) -> str:
    return _UNSAFE.sub("_", text)[:80]


def _colour(k: int) -> str:
    return TEAMS[k % len(TEAMS)]


def _daily(series: list[list[float]], days: int) -> list[float]:
    """The ledger's total at the end of each day (the last step at or before it)."""
    out, j, last = [], 0, 0.0
    for day in range(1, days + 1):
        while j < len(series) and series[j][0] <= day * 24:
            last = series[j][1]
            j += 1
        out.append(last)
    return out


def render(rows: list[dict[str, Any]], *, trace: str, seed: int) -> str:
    names = [_safe(r["strategy"]) for r in rows]
    charts: list[tuple[str, str]] = []
    teams = sorted({t for r in rows for t in r["cost_by_team_usd"]})
    charts.append(
        (
            "Cost per team",
            bars(
                "team-cost",
                [_safe(t) for t in teams],
                [
                    Series(names[k], _colour(k), [r["cost_by_team_usd"].get(t) or 0.0 for t in teams])
                    for k, r in enumerate(rows)
                ],
                stacked=False,
                y_title="USD",
            ),
        )
    )
    charts.append(
        (
            "Cost, lost to preemption, paid for idle",
            bars(
                "cost-lost",
                names,
                [
                    Series("spent", MEANING["spent"], [r["cost_usd"] or 0.0 for r in rows]),
                    Series("lost to preemption", MEANING["lost"], [r["lost_to_preemption_usd"] or 0.0 for r in rows]),
                    Series("idle", MEANING["idle"], [r["idle_usd"] or 0.0 for r in rows]),
                ],
                stacked=False,
                y_title="USD",
            ),
        )
    )
    charts.append(
        (
            "Deadlines met",
            bars(
                "deadlines",
                names,
                [Series("deadlines met (%)", MEANING["saved"], [100 * (r["deadline_hit_rate"] or 0.0) for r in rows])],
                stacked=False,
                y_title="% of jobs with a deadline",
                money=False,
                empty="no job with a deadline finished",
            ),
        )
    )
    charts.append(
        (
            "Queueing delay",
            bars(
                "queueing",
                names,
                [
                    Series(q, colour, [(r["queue_delay_s"].get(q) or 0.0) / 3600 for r in rows])
                    for q, colour in (("p50", TEAMS[0]), ("p95", TEAMS[1]), ("p99", TEAMS[2]))
                ],
                stacked=False,
                y_title="hours from submit to running",
                money=False,
                empty="no job waited",
            ),
        )
    )
    hours = max((r["cost_over_time_usd"][-1][0] for r in rows if r["cost_over_time_usd"]), default=0.0)
    days = min(MAX_DAYS, max(1, math.ceil(hours / 24)))
    charts.append(
        (
            "Cost over time",
            bars(
                "over-time",
                [f"day {d}" for d in range(1, days + 1)],
                [Series(names[k], _colour(k), _daily(r["cost_over_time_usd"], days)) for k, r in enumerate(rows)],
                stacked=False,
                y_title="USD spent so far",
            ),
        )
    )
    head = "".join(f"<th>{html.escape(r['strategy'])}</th>" for r in rows)
    body = "".join(
        f"<tr><td>{html.escape(label.strip())}</td>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>"
        for label, cells in figures.lines(rows)
    )
    sections = "".join(f"<section><h2>{html.escape(title)}</h2>{svg}</section>" for title, svg in charts)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<title>What the trace would cost, per strategy</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border-bottom: 1px solid #ddd; padding: 4px 10px; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
section {{ margin-top: 2em; }}
</style>
</head><body>
<h1>What the trace would cost, per strategy</h1>
<p>Trace {html.escape(trace[:200])}, seed {int(seed)}: the same jobs and the same draws for every strategy.
Idle is what the fleet's devices cost while no pod held them (every pool holds its nodes for the whole
span); lost to preemption is the work since the last checkpoint at each preemption.</p>
<table><thead><tr><th></th>{head}</tr></thead><tbody>{body}</tbody></table>
{sections}
</body></html>
"""
