"""Team totals that outlive the jobs (reconcile.teamspend), property-based: whatever the order of
ticks, deletions, failed writes, replayed steps and stale views, a team's spending equals what
its live jobs spent plus, for each deleted job, exactly what it had spent at the last write
before it went (the figure the policy's status carried), counted once; a new period starts
from zero; the status stays bounded."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accel_api.enums import BudgetPeriod, CapacityType
from accel_api.job import CostStatus
from accel_api.policy import LEDGER_CARRIED_JOBS, AcceleratorPolicySpec, SpendLedger, TeamSpend
from accel_operator.accounting import ledger, teamspend

T0 = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC)  # a Monday
TICK = dt.timedelta(minutes=10)
POLICY = AcceleratorPolicySpec.model_validate(
    {
        "budgets": [
            {"team": "red", "period": "monthly", "limitUsd": 1000},
            {"team": "red", "period": "daily", "limitUsd": 100},
            {"team": "blue", "period": "weekly", "limitUsd": 500},
        ]
    }
)
# uid -> (team, devices, USD per device-hour): started at T0, running until deleted.
JOBS = {
    "u0": ("red", 8, 2.5),
    "u1": ("red", 2, 11.06),
    "u2": ("blue", 4, 3.93),
    "u3": ("blue", 1, 1.25),
    "u4": ("green", 8, 9.0),  # no budget in this policy: never carried
}


def _cost(uid: str, until: dt.datetime) -> CostStatus:
    _, devices, price = JOBS[uid]
    return ledger.record(
        None, ledger.Observation(0, "p", CapacityType.SPOT, devices, T0, until, price, price, idle_fraction=0.25)
    )


def _spent(uid: str, start: dt.datetime, until: dt.datetime) -> float:
    """By hand: devices × hours since max(start, T0) × price."""
    _, devices, price = JOBS[uid]
    return devices * max(0.0, (until - max(start, T0)).total_seconds()) / 3600 * price


def _live(
    alive: set[str],
    now: dt.datetime,
    extra: frozenset[str] | set[str] = frozenset(),
    shown: dict[str, dt.datetime] | None = None,
) -> list[teamspend.LiveJob]:
    """The live jobs' ledgers now; ``shown``: when each job's status was last written (what the
    policy carries; nothing when never), else now."""
    out = []
    for u in sorted(alive | extra):
        written = None if shown is None else _cost(u, shown[u]) if u in shown else CostStatus()
        out.append(teamspend.LiveJob(u, JOBS[u][0], _cost(u, now), written=written))
    return out


def _by(spend: list[TeamSpend], team: str, period: BudgetPeriod) -> float:
    return next(s.spent_usd for s in spend if (s.team, s.period) == (team, period))


ops = st.lists(st.sampled_from(["tick", "delete", "fail", "replay", "stale", "restart", "throttled"]), max_size=30)


@settings(max_examples=150, deadline=None)
@given(ops=ops, data=st.data())
def test_deleted_jobs_keep_their_money_exactly_once(ops: list[str], data: st.DataObject) -> None:
    alive = set(JOBS)
    written: SpendLedger | None = None  # the policy's status.ledger (what the last good write stored)
    shown: dict[str, dt.datetime] = {}  # uid -> when the job's own status was last written
    written_at: dict[str, dt.datetime] = {}  # uid -> the job status time the last good policy write carried
    gone: set[str] = set()
    now = T0
    for op in ops:
        now += TICK
        if op == "delete" and alive:
            uid = data.draw(st.sampled_from(sorted(alive)))
            alive.discard(uid)
            gone.add(uid)
            continue
        # A stale watch that still shows jobs already folded: they count no more.
        extra = {u for u in gone if written is not None and u in written.settled_uids} if op == "stale" else set()
        if op != "throttled":  # the jobs' statuses are written this tick (else they keep an older ledger)
            shown.update(dict.fromkeys(alive, now))
        done = teamspend.step(POLICY, written, _live(alive, now, extra, shown), alive | extra, now)
        if op == "fail":
            continue  # the status write failed: the next step starts from what is stored
        if op == "replay":  # the same step again on what it produced: nothing moves
            again = teamspend.step(POLICY, done.ledger, _live(alive, now, shown=shown), alive, now)
            assert again.ledger == done.ledger and again.spend == done.spend and again.folded == ()
        if op == "restart":  # a new process: the stored copy, parsed from its wire form
            written = SpendLedger.model_validate(written.to_wire()) if written is not None else None
            done = teamspend.step(POLICY, written, _live(alive, now, shown=shown), alive, now)
        written = done.ledger
        for uid in alive & set(shown):
            written_at[uid] = shown[uid]
        # The invariant, by hand: live jobs' spending now + each deleted job's as its own status
        # held it at the last policy write.
        for team, period in (("red", BudgetPeriod.MONTHLY), ("red", BudgetPeriod.DAILY), ("blue", BudgetPeriod.WEEKLY)):
            start = ledger.period_start(period.value, now)
            expected = sum(_spent(u, start, now) for u in alive if JOBS[u][0] == team)
            expected += sum(_spent(u, start, written_at[u]) for u in gone if JOBS[u][0] == team and u in written_at)
            assert _by(done.spend, team, period) == pytest.approx(expected, abs=1e-4), (team, period, ops)
        assert len(set(written.settled_uids)) == len(written.settled_uids)
        assert not {c.uid for c in written.carried} & set(written.settled_uids)
        assert "u4" not in {c.uid for c in written.carried}


def test_a_new_period_starts_from_zero_and_a_deletion_at_the_boundary_counts_in_its_own_period() -> None:
    late = dt.datetime(2026, 11, 30, 23, 50, tzinfo=dt.UTC)
    first = teamspend.step(POLICY, None, _live({"u0"}, late), {"u0"}, late)
    assert _by(first.spend, "red", BudgetPeriod.MONTHLY) == pytest.approx(_spent("u0", T0, late))
    # Deleted while the operator is down across the month's end: its November money stays in
    # November; December starts at zero.
    dec = dt.datetime(2026, 12, 1, 0, 10, tzinfo=dt.UTC)
    after = teamspend.step(POLICY, first.ledger, [], set(), dec)
    assert after.folded == ("u0",)
    assert _by(after.spend, "red", BudgetPeriod.MONTHLY) == 0.0
    assert [s.period_start for s in after.ledger.settled] == []


def test_the_status_stays_bounded_and_keeps_the_biggest_spenders() -> None:
    many = {f"j{i}": ("red", 1 + i % 8, 2.0) for i in range(LEDGER_CARRIED_JOBS + 50)}
    JOBS.update(many)
    try:
        now = T0 + dt.timedelta(hours=1)
        done = teamspend.step(POLICY, None, _live(set(many), now), set(many), now)
        assert len(done.ledger.carried) == LEDGER_CARRIED_JOBS
        carried = {c.uid for c in done.ledger.carried}
        spent = {u: _spent(u, T0, now) for u in many}
        assert min(spent[u] for u in carried) >= max(spent[u] for u in set(many) - carried)
        # Every live job still counts while it lives, carried or not.
        assert _by(done.spend, "red", BudgetPeriod.MONTHLY) == pytest.approx(sum(_spent(u, T0, now) for u in many))
        assert len(repr(done.ledger.to_wire())) < 400_000  # well under etcd's 1.5 MB per object
    finally:
        for uid in many:
            del JOBS[uid]


def test_a_finished_jobs_figures_are_kept_between_steps_and_a_changed_ledger_is_summed_again() -> None:
    now = T0 + dt.timedelta(hours=3)
    done = ledger.close(_cost("u0", T0 + dt.timedelta(hours=2)), ledger.AttemptEnd(0, T0 + dt.timedelta(hours=2)))
    memo: teamspend.Memo = {}
    job = teamspend.LiveJob("u0", "red", done)
    first = teamspend.step(POLICY, None, [job], {"u0"}, now, memo=memo)
    assert memo["u0"][0] is done
    again = teamspend.step(POLICY, first.ledger, [job], {"u0"}, now + TICK, memo=memo)
    assert again.spend == first.spend and again.ledger == first.ledger
    # A new attempt: another ledger object, summed again (not the kept figures).
    more = ledger.record(done, ledger.Observation(1, "p", CapacityType.SPOT, 8, now, now + TICK, 2.5, 2.5))
    later = teamspend.step(POLICY, again.ledger, [teamspend.LiveJob("u0", "red", more)], {"u0"}, now + TICK, memo=memo)
    assert _by(later.spend, "red", BudgetPeriod.MONTHLY) == pytest.approx(
        _spent("u0", T0, T0 + 2 * dt.timedelta(hours=1)) + 8 * 2.5 / 6
    )
    running = teamspend.step(POLICY, None, _live({"u1"}, now), {"u1"}, now, memo=memo)
    assert "u1" not in memo and running.spend  # a running job's figures change every step: never kept


def test_a_job_beyond_the_carried_bound_seen_deleted_keeps_its_money() -> None:
    """The policy carries the biggest LEDGER_CARRIED_JOBS spenders; one more job, the smallest, is
    not carried, and this process sees it deleted: it is folded with its ledger at the deletion."""
    now = T0 + dt.timedelta(hours=1)
    costs = {
        f"big{i}": ledger.record(None, ledger.Observation(0, "p", CapacityType.SPOT, 1, T0, now, 2.0, 2.0))
        for i in range(LEDGER_CARRIED_JOBS)
    }
    small = ledger.record(None, ledger.Observation(0, "p", CapacityType.SPOT, 1, T0, now, 1.0, 1.0))
    live = [teamspend.LiveJob(uid, "red", cost) for uid, cost in costs.items()]
    first = teamspend.step(POLICY, None, [*live, teamspend.LiveJob("small", "red", small)], {*costs, "small"}, now)
    assert "small" not in {c.uid for c in first.ledger.carried}
    total = 2.0 * LEDGER_CARRIED_JOBS + 1.0
    assert _monthly(first.spend) == pytest.approx(total)
    later = now + TICK
    final = ledger.record(small, ledger.Observation(0, "p", CapacityType.SPOT, 1, T0, later, 1.0, 1.0))
    gone = {"small": teamspend.LiveJob("small", "red", final)}
    second = teamspend.step(POLICY, first.ledger, live, set(costs), later, final=gone)
    assert second.folded == ("small",)
    assert _monthly(second.spend) == pytest.approx(total + 1.0 / 6)  # charged to its deletion
    third = teamspend.step(POLICY, second.ledger, live, set(costs), later, final=gone)  # replayed
    assert _monthly(third.spend) == pytest.approx(total + 1.0 / 6)


def _monthly(spend: list[TeamSpend]) -> float:
    return next(s.spent_usd for s in spend if s.team == "red" and s.period is BudgetPeriod.MONTHLY)


def test_a_settled_jobs_kept_entry_counts_once_while_it_lives_and_once_when_folded() -> None:
    """A finished job's figures and carried entry are kept between steps (the memo): step after
    step, then deleted and folded, every step equals a fresh one (no memo) over the same state,
    and the job's money is counted once: neither dropped nor added twice."""
    end = T0 + dt.timedelta(hours=2)
    settled = ledger.close(_cost("u0", end), ledger.AttemptEnd(0, end))
    memo: teamspend.Memo = {}
    written: SpendLedger | None = None
    now = T0 + dt.timedelta(hours=3)
    alive = {"u0", "u1"}
    for i in range(6):
        now += TICK
        if i == 4:
            alive.discard("u0")  # deleted: folded with what the policy carries of it
        live = [teamspend.LiveJob(u, "red", settled if u == "u0" else _cost(u, now)) for u in sorted(alive)]
        kept = teamspend.step(POLICY, written, live, alive, now, memo=memo)
        fresh = teamspend.step(POLICY, written, live, alive, now)
        assert (kept.ledger, kept.spend, kept.folded) == (fresh.ledger, fresh.spend, fresh.folded)
        if "u0" in alive and i > 0:
            assert memo["u0"][3] is not None  # carried from the kept entry
        assert kept.folded == (("u0",) if i == 4 else ())
        expected = _spent("u0", T0, end) + _spent("u1", T0, now)
        assert _by(kept.spend, "red", BudgetPeriod.MONTHLY) == pytest.approx(expected, abs=1e-4)
        assert [c.uid for c in kept.ledger.carried].count("u0") == (1 if "u0" in alive else 0)
        written = kept.ledger
    assert written is not None
    assert [s.jobs for s in written.settled if s.period is BudgetPeriod.MONTHLY] == [1]


def test_a_kept_entry_is_not_reused_by_a_policy_with_other_periods_starting_at_the_same_time() -> None:
    """On the first of a month the daily and the monthly periods start at the same moment: the
    figures one policy kept for a job (monthly) are not another's (daily)."""
    monthly = AcceleratorPolicySpec.model_validate({"budgets": [{"team": "red", "period": "monthly", "limitUsd": 9}]})
    daily = AcceleratorPolicySpec.model_validate({"budgets": [{"team": "red", "period": "daily", "limitUsd": 9}]})
    start = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    end = start + dt.timedelta(hours=1)
    cost = ledger.record(None, ledger.Observation(0, "p", CapacityType.SPOT, 1, start, end, 2.0, 2.0))
    cost = ledger.close(cost, ledger.AttemptEnd(0, end))
    job, now = teamspend.LiveJob("u0", "red", cost), end + TICK
    memo: teamspend.Memo = {}
    first = teamspend.step(monthly, None, [job], {"u0"}, now, memo=memo)
    second = teamspend.step(daily, None, [job], {"u0"}, now, memo=memo)
    assert _by(first.spend, "red", BudgetPeriod.MONTHLY) == pytest.approx(2.0)
    assert _by(second.spend, "red", BudgetPeriod.DAILY) == pytest.approx(2.0)
    assert [f.period for f in second.ledger.carried[0].periods] == [BudgetPeriod.DAILY]
