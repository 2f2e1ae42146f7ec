"""The durable cost rollup (reconcile.rollup), pure: folding ended attempts once each (keyed by job
uid and attempt), whatever order, repetition or crash the folds and the marks come in; the
counters are the rollup plus the live jobs' unfolded attempts and never go down; the bounds keep
the money while they drop detail."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accel_api.costrollup import (
    ROLLUP_BUCKETS,
    ROLLUP_BYTES,
    ROLLUP_DAYS,
    ROLLUP_GONE,
    ROLLUP_HOUR_DAYS,
    ROLLUP_JOBS,
    Bucket,
    CostRollup,
)
from accel_api.enums import CapacityType
from accel_api.job import CostStatus
from accel_operator.accounting import accrual, costreport, ledger, rollup

T0 = dt.datetime(2026, 3, 31, 20, 0, tzinfo=dt.UTC)
H = dt.timedelta(hours=1)


def _attempt(
    cost: CostStatus | None,
    attempt: int,
    start: dt.datetime,
    end: dt.datetime,
    *,
    pool: str = "p",
    price: float = 3.6,
    devices: int = 2,
    close: bool = True,
) -> CostStatus:
    out = ledger.record(
        cost,
        ledger.Observation(attempt, pool, CapacityType.SPOT, devices, start, end, price, 9.0),
    )
    return ledger.close(out, ledger.AttemptEnd(attempt, end)) if close else out


def _total(values: dict[rollup.Key, ledger.Figures]) -> float:
    return sum(f.spent_usd for f in values.values())


def _counters(stored: CostRollup, live: dict[str, tuple[str, CostStatus]]) -> dict[rollup.Key, ledger.Figures]:
    """What the operator exports: the rollup plus every live job's unfolded attempts."""
    out = rollup.counters(stored)
    pending = rollup.pending_of(stored)
    for uid, (team, cost) in live.items():
        for (pool, capacity), f in rollup.live_by_pool(cost, pending.get(uid, ())).items():
            key = (team, pool, capacity)
            out[key] = out.get(key, ledger.Figures()) + f
    return out


def test_an_ended_attempt_is_folded_once_and_counted_once() -> None:
    cost = _attempt(None, 0, T0, T0 + H)  # 2 devices x 1 h x $3.60
    who = rollup.JobId("uid-a", "ns", "a", "research")
    stored = rollup.fold(CostRollup(), who, rollup.foldable(cost, ()))
    assert _total(rollup.counters(stored)) == pytest.approx(7.2)
    assert rollup.fold(stored, who, cost.attempts) is stored  # a replayed fold adds nothing
    # Before the mark reaches the job's status, the pending key keeps it out of the live count.
    assert _total(_counters(stored, {"uid-a": ("research", cost)})) == pytest.approx(7.2)
    marked = ledger.mark_rolled_up(cost, [0])
    assert rollup.foldable(marked, ()) == []
    assert _total(_counters(stored, {"uid-a": ("research", marked)})) == pytest.approx(7.2)
    pruned = rollup.prune(stored, {"uid-a": [0]}, {"uid-a"}, T0 + 2 * H)
    assert pruned.pending == [] and _total(_counters(pruned, {"uid-a": ("research", marked)})) == pytest.approx(7.2)


def test_a_deleted_jobs_money_stays_in_the_counters_and_its_row_is_kept() -> None:
    cost = _attempt(None, 0, T0, T0 + H)
    cost = _attempt(cost, 1, T0 + 2 * H, T0 + 3 * H, pool="q", close=False)  # running at the deletion
    who = rollup.JobId("uid-a", "ns", "a", "research", forecast_usd=20.0)
    stored = rollup.fold(CostRollup(), who, rollup.foldable(cost, ()))
    cost = ledger.mark_rolled_up(cost, [0])
    before = _counters(stored, {"uid-a": ("research", cost)})
    # Deleted at T0+3.5h: the open attempt is charged up to then, then folded with the rest.
    final = accrual.at_deletion(cost, T0 + 3.5 * H)
    gone = rollup.fold(stored, who, rollup.unfolded(final, ()), gone=T0 + 3.5 * H, summary=final)
    after = _counters(gone, {})
    assert _total(after) == pytest.approx(7.2 + 2 * 1.5 * 3.6)
    for key, f in before.items():
        assert after[key].spent_usd >= f.spent_usd - 1e-9  # no counter went down
    (row,) = gone.jobs
    assert (row.namespace, row.name, row.forecast_usd) == ("ns", "a", 20.0)
    assert sum(d.f[0] for d in row.days) == pytest.approx(_total(after))
    # The deletion seen again (a lagging view) adds nothing.
    again = rollup.fold(gone, who, final.attempts, gone=T0 + 4 * H, summary=final)
    assert _total(rollup.counters(again)) == pytest.approx(_total(after)) and len(again.jobs) == 1


def test_money_is_split_by_utc_hour_and_by_day_once_older() -> None:
    cost = _attempt(None, 0, T0, T0 + 6 * H)  # 20:00 to 02:00 the next day
    stored = rollup.fold(CostRollup(), rollup.JobId("u", "ns", "a", "t"), cost.attempts)
    hours = {b.day: b.f[0] for b in stored.buckets}
    assert hours == {f"2026-03-31T{h}": pytest.approx(7.2) for h in (20, 21, 22, 23)} | {
        f"2026-04-01T0{h}": pytest.approx(7.2) for h in (0, 1)
    }
    window = (T0 + 5 * H, T0 + 7 * H)  # 01:00 to 03:00 on 2026-04-01
    assert [b.day for b in stored.buckets if rollup.in_window(b.day, *window)] == ["2026-04-01T01"]
    # Still within ROLLUP_HOUR_DAYS: bounding keeps the hours.
    assert rollup.bound(stored, T0 + 6 * H) is stored
    # Older: the hours become days, the money stays.
    later = rollup.bound(stored, T0 + (ROLLUP_HOUR_DAYS + 2) * 24 * H)
    days = {b.day: b.f[0] for b in later.buckets}
    assert days == {"2026-03-31": pytest.approx(4 * 7.2), "2026-04-01": pytest.approx(2 * 7.2)}
    assert [b.day for b in later.buckets if rollup.in_window(b.day, *window)] == ["2026-04-01"]


def _hand_sum(intervals: list[tuple[dt.datetime, dt.datetime, float]], lo: dt.datetime, hi: dt.datetime) -> float:
    """Devices x seconds x price of the parts of ``intervals`` inside [lo, hi), by hand."""
    out = 0.0
    for start, end, price in intervals:
        a, b = max(start, lo), min(end, hi)
        if b > a:
            out += 2 * (b - a).total_seconds() / 3600 * price
    return out


# Jobs' attempts within the last ROLLUP_HOUR_DAYS days: (job, start minute, minutes, price).
recent_attempts = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=3),
        st.integers(min_value=0, max_value=5 * 24 * 60),
        st.integers(min_value=1, max_value=36 * 60),
        st.sampled_from([1.0, 2.5, 3.6]),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(
    recent_attempts,
    st.integers(min_value=0, max_value=6 * 24),
    st.integers(min_value=1, max_value=6 * 24),
    st.booleans(),
)
def test_a_window_report_of_deleted_jobs_equals_the_hand_sum_of_the_intervals_inside_it(
    attempts: list[tuple[int, int, int, float]], start_hour: int, hours: int, deleted: bool
) -> None:
    """Deleted (or folded) jobs' money in a report whose window starts and ends on any UTC hour
    within the last ROLLUP_HOUR_DAYS days is the hand sum of the intervals inside the window."""
    base = T0.replace(hour=0) - 24 * H
    now = base + 7 * 24 * H  # every attempt is within ROLLUP_HOUR_DAYS of now
    stored = CostRollup()
    jobs: list[costreport.JobCost] = []
    intervals: list[tuple[dt.datetime, dt.datetime, float]] = []
    costs: dict[int, CostStatus | None] = {}
    for n, (j, minute, minutes, price) in enumerate(attempts):
        start = base + dt.timedelta(minutes=minute)
        end = start + dt.timedelta(minutes=minutes)
        costs[j] = _attempt(costs.get(j), n, start, end, price=price)
        intervals.append((start, end, price))
    for j, cost in costs.items():
        assert cost is not None
        who = rollup.JobId(f"uid-{j}", "ns", f"j{j}", "team")
        if deleted:
            stored = rollup.fold(stored, who, cost.attempts, gone=now, summary=cost)
        else:
            stored = rollup.fold(stored, who, cost.attempts)
            marked = ledger.mark_rolled_up(cost, [a.attempt for a in cost.attempts])
            jobs.append(costreport.JobCost("ns", f"j{j}", "team", marked, uid=f"uid-{j}"))
    stored = rollup.bound(stored, now)
    lo = base + start_hour * H
    hi = lo + hours * H
    (row,) = costreport.rows(jobs, costreport.By.TEAM, lo, hi, stored) or [costreport.Row("team")]
    assert row.totals.spent_usd == pytest.approx(_hand_sum(intervals, lo, hi), abs=1e-4)
    pool_rows = costreport.rows(jobs, costreport.By.POOL, lo, hi, stored)
    assert sum(r.totals.spent_usd for r in pool_rows) == pytest.approx(_hand_sum(intervals, lo, hi), abs=1e-4)


# Operations on a small world of jobs: an attempt of a job ends, the operator folds (and the
# rollup write may fail), the marks are written (or fail), a job is deleted, the operator restarts
# (forgets what it did not store).
ops = st.lists(
    st.tuples(
        st.sampled_from(["end", "fold", "fold-fails", "mark", "mark-fails", "delete", "restart", "prune"]),
        st.integers(min_value=0, max_value=3),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(ops)
def test_folds_marks_deletions_and_crashes_neither_lose_nor_double_count(steps: list[tuple[str, int]]) -> None:
    statuses: dict[str, CostStatus] = {}  # the jobs' ledgers as their status holds them
    teams = {f"uid-{i}": f"team{i % 2}" for i in range(4)}
    attempts = dict.fromkeys(teams, 0)
    stored = CostRollup()  # what the ConfigMap holds
    spent = 0.0  # the hand computation: every ended attempt's money
    last = _total(_counters(stored, {}))
    deleted: set[str] = set()
    now = T0
    for op, i in steps:
        uid = f"uid-{i}"
        now += H
        if op == "end" and uid not in deleted:
            n = attempts[uid]
            statuses[uid] = _attempt(statuses.get(uid), n, now - H, now - H / 2, price=1.0 + i)
            attempts[uid] = n + 1
            spent += 2 * 0.5 * (1.0 + i)
        elif op in ("fold", "fold-fails"):
            value = stored
            pending = rollup.pending_of(value)
            for u, cost in statuses.items():
                value = rollup.fold(
                    value, rollup.JobId(u, "ns", u, teams[u]), rollup.foldable(cost, pending.get(u, ()))
                )
            if op == "fold":
                stored = value
        elif op in ("mark", "mark-fails") and uid in statuses:
            held = rollup.pending_of(stored).get(uid, frozenset())
            if op == "mark":
                statuses[uid] = ledger.mark_rolled_up(statuses[uid], held)
        elif op == "delete" and uid in statuses:
            cost = statuses.pop(uid)
            pending = rollup.pending_of(stored)
            stored = rollup.fold(
                stored,
                rollup.JobId(uid, "ns", uid, teams[uid]),
                rollup.unfolded(cost, pending.get(uid, ())),
                gone=now,
                summary=cost,
            )
            deleted.add(uid)
        elif op == "prune":
            marked = {u: [a.attempt for a in c.attempts if a.rolled_up] for u, c in statuses.items()}
            stored = rollup.prune(stored, marked, set(statuses), now)
        # "restart": nothing in memory survives; everything here is what was stored.
        total = _total(_counters(stored, {u: (teams[u], c) for u, c in statuses.items()}))
        assert total == pytest.approx(spent, abs=1e-5)
        assert total >= last - 1e-6
        last = total


def test_the_bounds_keep_the_money_and_the_size() -> None:
    stored = CostRollup()
    long = "p" * 200
    day0 = T0 - dt.timedelta(days=ROLLUP_DAYS + 40)
    for d in range(ROLLUP_DAYS + 40):
        start = day0 + dt.timedelta(days=d)
        for k in range(12):
            cost = _attempt(None, 0, start, start + H, pool=f"{long}-{k}")
            stored = stored.model_copy(
                update={"buckets": [*stored.buckets, *rollup.fold(CostRollup(), _who(d, k), cost.attempts).buckets]}
            )
    for j in range(ROLLUP_JOBS + 10):
        cost = _attempt(None, 0, T0, T0 + H, pool=f"{long}-{j % 12}")
        stored = rollup.fold(stored, _who(j, 99), [], gone=T0, summary=cost)
    money = _total(rollup.counters(stored))
    bounded = rollup.bound(stored, T0)
    assert _total(rollup.counters(bounded)) == pytest.approx(money)
    assert len(bounded.buckets) <= ROLLUP_BUCKETS
    oldest = (T0 - dt.timedelta(days=ROLLUP_DAYS)).date().isoformat()
    assert all(b.day >= oldest for b in bounded.buckets)
    assert rollup.size(bounded) <= ROLLUP_BYTES
    assert len(bounded.jobs) <= ROLLUP_JOBS
    # It round-trips through its wire form (what the ConfigMap holds) unchanged.
    from accel_operator.adapters.kube.costs import parse_rollup, rollup_json

    assert parse_rollup({"rollup.json": rollup_json(bounded)}) == bounded


def _who(d: int, k: int) -> rollup.JobId:
    return rollup.JobId(f"uid-{d}-{k}", "ns", f"j{d}-{k}", f"team{k % 3}")


def test_a_gone_jobs_key_is_kept_for_a_while_then_dropped() -> None:
    cost = _attempt(None, 0, T0, T0 + H)
    who = rollup.JobId("u", "ns", "a", "t")
    stored = rollup.fold(CostRollup(), who, cost.attempts, gone=T0 + H, summary=cost)
    assert stored.pending == [] and rollup.gone_count(stored) == 1  # a digest, not a pending key
    assert 0 in rollup.pending_of(stored).get("u") and 0 not in rollup.pending_of(stored).get("v")
    kept = rollup.prune(stored, {}, set(), T0 + H + rollup.GONE_KEEP)
    assert kept is stored
    assert rollup.fold(kept, who, cost.attempts, gone=T0 + 2 * H, summary=cost) is kept  # a lagging view
    assert rollup.gone_count(rollup.prune(stored, {}, set(), T0 + 2 * H + rollup.GONE_KEEP)) == 0
    assert _total(rollup.counters(rollup.prune(stored, {}, set(), T0 + 30 * H))) == pytest.approx(7.2)


def test_twenty_thousand_deletions_stay_within_the_size_and_a_replay_folds_nothing_twice() -> None:
    """500 deleted jobs every 6 minutes (20,000 in 4 hours, faster than the 11,500 in 6 hours that
    took the pending keys past 1 MiB): every value written fits, the money is all there, and the
    deletions folded again after a crash (the newest within ``ROLLUP_GONE``, and an older one the
    open attempts still hold) add nothing."""
    stored, spent, batches = CostRollup(), 0.0, []
    held = {"uid-0"}  # still in the open attempts beside the rollup (their rewrite failed)
    now = T0
    for step in range(40):
        now = T0 + step * dt.timedelta(minutes=6)
        # Two attempts each (one ended, one running at the deletion); the ledgers are alike per pool.
        like = []
        for p in range(7):
            cost = _attempt(None, 0, now - H, now - H / 2, price=0.01, pool=f"p{p}")
            cost = _attempt(cost, 1, now - H / 2, now, price=0.01, pool=f"p{p}", close=False)
            final = accrual.at_deletion(cost, now)
            like.append(rollup.item(rollup.JobId("", "ns", "", ""), final.attempts, gone=now, summary=final))
        batch = []
        for k in range(500):
            i = step * 500 + k
            spent += 2 * 1.0 * 0.01
            who = rollup.JobId(f"uid-{i}", "ns", f"j{i}", f"team{i % 5}")
            batch.append(dataclasses.replace(like[i % 7], job=who))
        batches.append(batch)
        stored = rollup.bound(rollup.prune(rollup.fold_many(stored, batch), {}, set(), now, held=held), now)
        assert rollup.size(stored) <= ROLLUP_BYTES  # what the ConfigMap is sent: always within 1 MiB
        assert _total(rollup.counters(stored)) == pytest.approx(spent, abs=1e-4)
    assert rollup.gone_count(stored) == ROLLUP_GONE  # the bound (the one the open attempts hold within it)
    assert stored.pending == []
    # The newest deletions within the bound (uid-0, held, takes one place of it), and uid-0.
    replay = [it for batch in batches for it in batch][-(ROLLUP_GONE - 1) :]
    replay.append(batches[0][0])
    again = rollup.fold_many(stored, replay)
    assert again is stored  # nothing folded twice, no summary twice
    # It round-trips through its wire form (what the ConfigMap holds) unchanged.
    from accel_operator.adapters.kube.costs import parse_rollup, rollup_json

    assert parse_rollup({"rollup.json": rollup_json(stored)}) == stored


def test_too_many_hour_buckets_become_days_oldest_first_and_keep_the_money() -> None:
    now = T0 + 24 * H
    stored = CostRollup()
    for k in range(30):  # 30 pools x 6 days x 24 hours: 4,320 hour buckets, over ROLLUP_BUCKETS
        cost = _attempt(None, 0, now - 6 * 24 * H, now, pool=f"p{k}")
        stored = rollup.fold(stored, rollup.JobId(f"u{k}", "ns", f"j{k}", "t"), cost.attempts)
    assert len(stored.buckets) > ROLLUP_BUCKETS
    bounded = rollup.bound(stored, now)
    assert len(bounded.buckets) <= ROLLUP_BUCKETS
    assert _total(rollup.counters(bounded)) == pytest.approx(_total(rollup.counters(stored)))
    days = sorted({b.day for b in bounded.buckets if len(b.day) == len("YYYY-MM-DD")})
    hours = sorted({b.day for b in bounded.buckets if len(b.day) > len("YYYY-MM-DD")})
    assert days and hours and days[-1] < hours[0]  # the oldest became days; the recent stay hours
    assert bounded.before == []  # no money left the per-period buckets


def test_over_the_size_hours_before_yesterday_become_days_before_any_day_leaves() -> None:
    now = T0 + 24 * H
    long = "p" * 240
    buckets = []
    for d in range(1, 390):  # 390 days of day buckets, then 7 days of hours: far over 900 KiB
        day = (now - d * 24 * H).date().isoformat()
        buckets += [Bucket(day=day, team="t" * 63, pool=f"{long}-{k}", f=[1.0] * 7) for k in range(6)]
    for h in range(ROLLUP_HOUR_DAYS * 24):
        hour = (now - h * H).strftime("%Y-%m-%dT%H")
        buckets += [Bucket(day=hour, team="t" * 63, pool=f"{long}-{k}", f=[1.0] * 7) for k in range(6)]
    full = CostRollup(buckets=buckets)
    assert rollup.size(full) > ROLLUP_BYTES and len(buckets) <= ROLLUP_BUCKETS
    bounded = rollup.bound(full, now)
    assert rollup.size(bounded) <= ROLLUP_BYTES
    assert _total(rollup.counters(bounded)) == pytest.approx(_total(rollup.counters(full)))
    hours = sorted(b.day for b in bounded.buckets if len(b.day) > len("YYYY-MM-DD"))
    days = sorted(b.day for b in bounded.buckets if len(b.day) == len("YYYY-MM-DD"))
    assert hours[0] >= (now - 24 * H).date().isoformat()  # the last day's hours stay hours
    assert len(days) > 6 * ROLLUP_HOUR_DAYS  # and more days stay than hours alone would leave
