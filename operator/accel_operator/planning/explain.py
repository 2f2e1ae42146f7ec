"""The planner's sentences: why a candidate cannot run, why it lost, and the decision.

A plan weighs hundreds of candidates in a few milliseconds, so the failed checks are kept as bits
and the sentences are written here, only when someone reads them. ``money`` and ``duration`` are
the one formatter of dollars and time for every sentence and table.
"""

from __future__ import annotations

import math

from accel_api import bounds
from accel_api.enums import CapacityType
from accel_operator.planning import candidates as cand
from accel_operator.planning.candidates import Candidate, JobTerms, Plan
from accel_operator.planning.layout import Layout

GB = 1e9


# Above this a figure in a sentence is written in engineering notation (``5.19e15``), not as a
# run of digits nobody reads.
ENGINEERING_ABOVE = 1e6


def eng(x: float, small: str = ",.0f") -> str:
    """``x`` formatted with ``small`` up to ``ENGINEERING_ABOVE``, else in engineering notation
    (three significant digits, an exponent that is a multiple of 3)."""
    if not math.isfinite(x) or abs(x) < ENGINEERING_ABOVE:
        return format(x, small)
    exponent = 3 * math.floor(math.log10(abs(x)) / 3)
    mantissa = x / 10**exponent
    if abs(round(mantissa, 3 - len(str(int(abs(mantissa)))))) >= 1000:  # 999.96e6 rounds to 1.00e9
        exponent += 3
        mantissa /= 1000
    digits = max(0, 3 - len(str(int(abs(mantissa)))))
    return f"{mantissa:.{digits}f}e{exponent}"


def duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "never (preemptions outpace progress)"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f}m"
    return f"{eng(seconds / 3600, '.1f')}h"


def money(x: float) -> str:
    if not math.isfinite(x):
        return "unbounded"
    return f"${eng(x)}" if x >= 100 else f"${x:,.2f}"


def failed_checks(c: Candidate) -> list[str]:
    """The failed checks of ``c`` as sentences, in check order."""
    job, f = c.source.job, c.failed
    out: list[str] = []
    if f & cand.MIN_DEVICES:
        out.append(f"{c.devices} devices < placement.minDevices {job.min_devices}")
    if f & cand.MAX_DEVICES:
        out.append(f"{c.devices} devices > {job.max_devices_from} {job.max_devices}")
    if f & cand.MAX_NODES:
        out.append(f"{c.nodes} nodes > placement.maxNodes {job.max_nodes}")
    if f & cand.LAYOUT:
        layout = Layout.of(job.profile, c.devices, c.nodes)
        per_node = c.source.offer.spec.devices_per_node
        out.append(layout.problem(per_node) or "impossible layout")
    mem = c.memory
    if f & cand.MEMORY and mem is not None:
        out.append(
            f"needs {mem.required_bytes / GB:.1f} GB per device > {mem.usable_bytes / GB:.1f} GB usable "
            f"({mem.device_bytes / GB:.1f} GB {c.accelerator}; peak at {mem.peak_at})"
        )
    ce = c.cost
    if ce is not None:
        if f & cand.DEADLINE:
            out.append(f"misses deadline {job.spec.deadline}: takes {duration(ce.expected_seconds)}")
        if f & cand.MAX_COST and job.max_cost is not None:
            out.append(f"costs {money(ce.expected_usd)} > maxCost {money(job.max_cost)}")
        if f & cand.PREEMPTIONS:
            shown = eng(ce.preemptions, ".1f") if math.isfinite(ce.preemptions) else "unbounded"
            out.append(f"expects {shown} preemptions > spot.maxPreemptions {job.max_preemptions}")
        if f & cand.HORIZON:
            out.append(
                f"takes {duration(ce.expected_seconds)}, beyond the planning horizon of "
                f"{bounds.PLANNING_HORIZON_SECONDS / 86_400:.0f} days: process fewer tokens (workload.tokens) "
                "or allow more devices (placement.maxDevices)"
            )
    return out


def objective(job: JobTerms, c: Candidate) -> tuple[float, float]:
    assert c.cost is not None
    if job.by_time:
        return c.cost.expected_seconds, c.cost.expected_usd
    return c.cost.expected_usd, c.cost.expected_seconds


def versus(job: JobTerms, c: Candidate, win: Candidate) -> str:
    """One line: why ``c`` (feasible) lost to ``win``."""
    cp, cs = objective(job, c)
    wp, ws = objective(job, win)
    what, other = ("time", "cost") if job.by_time else ("cost", "time")

    def fmt(x: float) -> str:
        return duration(x) if job.by_time else money(x)

    if cp < wp:  # only the spot preference ranks a better objective lower
        within = f"{cand.SPOT_PREFERENCE:.0%}"
        return f"{fmt(cp)} vs {fmt(wp)}, but {win.label} is spot and within {within} (spot.policy prefer)"
    if cp <= wp * (1 + cand.TIE) and cs > ws * (1 + cand.TIE):
        return f"same {what} as {win.label} but {cs / ws:.1f}× the {other}"
    ratio = cp / wp if wp > 0 else math.inf
    shown = f"{ratio:.1f}×" if ratio >= 1.1 else f"+{(ratio - 1) * 100:.1f}%"
    return f"{shown} the {what} of {win.label} ({fmt(cp)} vs {fmt(wp)})"


def problems(c: Candidate) -> tuple[str, ...]:
    """Why ``c`` may not run as asked; empty when feasible."""
    return c.source.problems + tuple(failed_checks(c))


def reasons(c: Candidate) -> tuple[str, ...]:
    """Empty for the winner; why it lost otherwise."""
    if c.rank is None:
        return problems(c)
    if c.winner is None:
        return ()
    return (versus(c.source.job, c, c.winner),)


def pool_reasons(plan: Plan) -> tuple[tuple[str, str], ...]:
    """(pool, why its best placement lost or cannot run), one per pool; "chosen" for the winner's."""
    return tuple((c.pool, "; ".join(reasons(c)) or "chosen") for c in cand.best_per_pool(plan.candidates))


def left_out_pools(group: cand.LeftOutGroup) -> str:
    """The pools of ``group`` as a sentence names them: the first few, and how many more."""
    names = ", ".join(group.pools)
    more = group.total - len(group.pools)
    return f"{names} and {more} more" if more > 0 else names


def left_out(left: cand.LeftOut, groups: int = 3) -> str:
    """The pools the placement left out, per reason (``groups`` reasons at most, the largest
    first): "p1, p2 and 7 more: not in placement.pools (p0); ..."."""
    shown = [f"{left_out_pools(g)}: {'; '.join(g.reasons)}" for g in left.groups[:groups]]
    rest = sum(g.total for g in left.groups[groups:])
    if rest:
        shown.append(f"and {rest} more pools left out by the placement")
    return "; ".join(shown)


def decision(job: JobTerms, ranked: list[Candidate], feasible: int, left: cand.LeftOut = cand.NO_LEFT_OUT) -> str:
    """The plan's decision in one sentence (``left``: the pools the placement left out, which
    have no candidates)."""
    win = ranked[0] if ranked and ranked[0].rank == 1 else None
    if win is not None and win.cost is not None and win.memory is not None:
        why = "fastest" if job.by_time else "cheapest"
        if job.prefer_spot and win.capacity_type is CapacityType.SPOT:
            why += " (spot preferred)"
        return (
            f"{win.label} ({win.nodes} node{'s' if win.nodes > 1 else ''}, {win.capacity_type.value}): "
            f"{why} of {feasible} feasible placements: {money(win.cost.expected_usd)}, "
            f"{duration(win.cost.expected_seconds)}, {win.memory.footprint_bytes / GB:.1f} GB per device"
        )
    if not ranked and not left:
        return "no pools to consider"
    best = cand.best_per_pool(ranked)
    shown = [f"{c.pool}: {'; '.join(reasons(c))}" for c in best[:5]]
    if len(best) > 5:
        shown.append(f"and {len(best) - 5} more pools (see alternatives)")
    if left:
        shown.append(left_out(left))
    return f"no feasible placement in {len(best) + left.count} pools: " + "; ".join(shown)
