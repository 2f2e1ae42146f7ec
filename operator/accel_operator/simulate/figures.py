"""The figures of one replay, as a platform team compares strategies: cost (total, per team,
saved by spot, lost to preemption), delays (queueing, completion), deadlines and utilization.

Cost is the accountant's ledger (each job's ``status.cost``). Work lost to preemption is the
simulator's own count (device-seconds since the last checkpoint at each preemption), priced at
the job's average rate; the ledger's ``lostToPreemptionUsd`` is shown beside it.
"""

from __future__ import annotations

import math
from typing import Any

from accel_api.durations import parse_seconds
from accel_api.enums import JobPhase
from accel_operator.simulate.replay import Result


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def _r(x: float | None, digits: int = 2) -> float | None:
    return None if x is None else round(x, digits)


def _idle(result: Result) -> tuple[float, float]:
    """Devices paid for while idle: every pool holds its ``maxNodes`` nodes for the whole span
    (the simulation's fleet, from the trace's start to the last job's end); the device-seconds
    of that no pod held, priced at the pool's own price per device-hour (spot price on a spot
    pool). Returns (device-seconds, USD)."""
    seconds = usd = 0.0
    for pool, devices in result.pool_devices.items():
        idle = max(0.0, devices * result.span_seconds - result.busy.get(pool, 0.0))
        seconds += idle
        usd += idle / 3600.0 * result.pool_price.get(pool, 0.0)
    return seconds, usd


def _overruns(result: Result) -> dict[str, float]:
    """USD each team spent beyond its budgets: per policy budget and period, the highest spend
    the accountant reported for that period over its limit, summed (teams with a budget only;
    0 where every period stayed within)."""
    out: dict[str, float] = {}
    for (_policy, team, _period, _start), (spent, limit) in result.spend.items():
        out[team] = out.get(team, 0.0) + max(0.0, spent - limit)
    return out


def figures(result: Result) -> dict[str, Any]:
    """One strategy's figures (plain JSON values; USD, hours and seconds as named)."""
    spent = on_demand = ledger_lost = device_s = lost_s = lost_usd = 0.0
    teams: dict[str, float] = {}
    waits: list[float] = []
    jcts: list[float] = []
    deadlines = met = succeeded = failed = preemptions = memory = refused = 0
    rules: dict[str, int] = {}
    for key, rec in result.records.items():
        st = result.statuses[key]
        cost = st.cost
        job_spent = cost.spent_usd if cost else 0.0
        spent += job_spent
        on_demand += cost.on_demand_usd if cost else 0.0
        ledger_lost += cost.lost_to_preemption_usd if cost else 0.0
        device_s += cost.device_seconds if cost else 0.0
        lost_s += rec.lost_device_seconds
        if cost and cost.device_seconds > 0:
            lost_usd += rec.lost_device_seconds * job_spent / cost.device_seconds
        teams[rec.arrival.team] = teams.get(rec.arrival.team, 0.0) + job_spent
        preemptions += rec.preemptions
        if rec.first_start is not None:
            waits.append(rec.first_start - rec.arrival.submit)
        if st.phase is JobPhase.SUCCEEDED:
            succeeded += 1
            assert rec.end is not None
            jcts.append(rec.end - rec.arrival.submit)
        elif st.phase is JobPhase.FAILED:
            failed += 1
        elif rec.memory_failed:
            memory += 1
        elif rec.refused:
            refused += 1
            for rule in rec.refused:
                rules[rule] = rules.get(rule, 0) + 1
        if rec.arrival.spec.deadline:
            deadlines += 1
            limit = parse_seconds(rec.arrival.spec.deadline)
            if st.phase is JobPhase.SUCCEEDED and rec.end is not None and rec.end - rec.arrival.submit <= limit:
                met += 1
    jobs = len(result.records)
    span = result.span_seconds
    idle_s, idle_usd = _idle(result)
    overruns = _overruns(result)
    return {
        "strategy": result.strategy,
        "seed": result.seed,
        "jobs": jobs,
        "succeeded": succeeded,
        "failed": failed,
        "failed_for_memory": memory,
        "refused_by_policy": refused,
        "refused_rules": dict(sorted(rules.items())),
        "unfinished": jobs - succeeded - failed - memory - refused,
        "cost_usd": _r(spent),
        "cost_by_team_usd": {t: _r(v) for t, v in sorted(teams.items())},
        "on_demand_equivalent_usd": _r(on_demand),
        "spot_savings_usd": _r(on_demand - spent),
        "preemptions": preemptions,
        "lost_to_preemption_usd": _r(lost_usd),
        "lost_to_preemption_ledger_usd": _r(ledger_lost),
        "lost_device_hours": _r(lost_s / 3600.0),
        "device_hours": _r(device_s / 3600.0),
        "lost_share": _r(lost_s / device_s, 4) if device_s else None,
        "queue_delay_s": {f"p{q}": _r(_pct(waits, q / 100), 1) for q in (50, 95, 99)},
        "completion_time_s": {f"p{q}": _r(_pct(jcts, q / 100), 1) for q in (50, 95, 99)},
        "deadlines": deadlines,
        "deadline_hit_rate": _r(met / deadlines, 4) if deadlines else None,
        "utilization": _r(device_s / (result.devices * span), 4) if span > 0 and result.devices else None,
        "idle_device_hours": _r(idle_s / 3600.0),
        "idle_usd": _r(idle_usd),
        "budget_overrun_by_team_usd": {t: _r(v) for t, v in sorted(overruns.items())},
        "cost_over_time_usd": [[h, c] for h, c in result.cost_series],
        "span_hours": _r(span / 3600.0),
        "engine_passes": result.passes,
    }


def _money(x: Any) -> str:
    return "-" if x is None else f"${x:,.2f}"


def _hours(x: Any) -> str:
    return "-" if x is None else f"{x / 3600:.2f}h"


def lines(rows: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """The table's rows: a label and one cell per strategy (the table's and the HTML page's)."""
    lines: list[tuple[str, list[str]]] = [
        (
            "jobs ok / failed / memory / refused / unfinished",
            [
                f"{r['succeeded']} / {r['failed']} / {r['failed_for_memory']} / {r['refused_by_policy']} / "
                f"{r['unfinished']}"
                for r in rows
            ],
        ),
        ("cost", [_money(r["cost_usd"]) for r in rows]),
        ("spot savings", [_money(r["spot_savings_usd"]) for r in rows]),
        ("preemptions", [str(r["preemptions"]) for r in rows]),
        ("lost to preemption", [_money(r["lost_to_preemption_usd"]) for r in rows]),
        ("lost device-hours", [f"{r['lost_device_hours']:.1f}" for r in rows]),
        ("device-hours", [f"{r['device_hours']:.1f}" for r in rows]),
        ("queue delay p50/p95/p99", ["/".join(_hours(v) for v in r["queue_delay_s"].values()) for r in rows]),
        ("completion p50/p95/p99", ["/".join(_hours(v) for v in r["completion_time_s"].values()) for r in rows]),
        (
            "deadlines met",
            [
                "-" if r["deadline_hit_rate"] is None else f"{r['deadline_hit_rate']:.1%} of {r['deadlines']}"
                for r in rows
            ],
        ),
        ("utilization", ["-" if r["utilization"] is None else f"{r['utilization']:.1%}" for r in rows]),
        ("idle (device-hours)", [f"{_money(r['idle_usd'])} ({r['idle_device_hours']:.0f})" for r in rows]),
    ]
    teams = sorted({t for r in rows for t in r["cost_by_team_usd"]})
    lines += [(f"  cost: {t}", [_money(r["cost_by_team_usd"].get(t)) for r in rows]) for t in teams]
    over = sorted({t for r in rows for t in r["budget_overrun_by_team_usd"]})
    lines += [(f"  over budget: {t}", [_money(r["budget_overrun_by_team_usd"].get(t)) for r in rows]) for t in over]
    refusals = sorted({k for r in rows for k in r["refused_rules"]})
    lines += [(f"  refused: {k}", [str(r["refused_rules"].get(k, 0)) for r in rows]) for k in refusals]
    return lines


def table(rows: list[dict[str, Any]]) -> str:
    """The strategies side by side, one column each."""
    lines_ = lines(rows)
    head = [("", [r["strategy"] for r in rows])]
    width = max(len(label) for label, _ in head + lines_)
    cols = [max(len(c) for _, cells in head + lines_ for c in [cells[i]]) for i in range(len(rows))]
    out = []
    for label, cells in head + lines_:
        out.append(f"{label:<{width}}  " + "  ".join(f"{c:>{cols[i]}}" for i, c in enumerate(cells)))
    return "\n".join(out)
