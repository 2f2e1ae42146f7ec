"""Open attempts kept beside the cost rollup (reconcile.rollup), pure: folding many jobs at once is
folding them one by one; an attempt not folded yet is kept as accrued, and folded from there once
its job is gone while no operator saw it (never twice, never when its job still exists); the
shards stay within their bounds."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accel_api.costrollup import ROLLUP_OPEN_BYTES, ROLLUP_OPEN_SHARDS, CostRollup, JobDay, OpenAttempt, OpenShard
from accel_api.durations import stamp_exact
from accel_api.enums import CapacityType
from accel_api.job import CostStatus
from accel_operator.accounting import ledger, rollup
from accel_operator.adapters.kube.costs import open_json

T0 = dt.datetime(2026, 3, 31, 20, 0, tzinfo=dt.UTC)
H = dt.timedelta(hours=1)


def _cost(attempt: int, start: dt.datetime, end: dt.datetime, *, close: bool, devices: int = 2) -> CostStatus:
    out = ledger.record(None, ledger.Observation(attempt, "p", CapacityType.SPOT, devices, start, end, 3.6, 9.0))
    return ledger.close(out, ledger.AttemptEnd(attempt, end)) if close else out


def _spent(stored: CostRollup) -> float:
    return sum(f.spent_usd for f in rollup.counters(stored).values())


jobs = st.lists(
    st.tuples(
        st.integers(0, 5),  # which uid
        st.integers(0, 2),  # attempt
        st.integers(1, 60),  # hours
        st.booleans(),  # deleted with it
    ),
    max_size=25,
)


@settings(max_examples=120, deadline=None)
@given(jobs)
def test_folding_many_at_once_is_folding_them_one_by_one(spec: list[tuple[int, int, int, bool]]) -> None:
    items = []
    for uid, attempt, hours, gone in spec:
        cost = _cost(attempt, T0, T0 + hours * H, close=True)
        who = rollup.JobId(f"uid-{uid}", "ns", f"j{uid}", f"team-{uid % 2}")
        items.append(rollup.item(who, cost.attempts, gone=T0 + hours * H if gone else None, summary=cost))
    one_by_one = CostRollup()
    for it in items:
        one_by_one = rollup.fold_many(one_by_one, [it])
    at_once = rollup.fold_many(CostRollup(), items)

    def rows(r: CostRollup) -> dict[tuple[str, str, str, str], list[float]]:
        return {(b.day, b.team, b.pool, b.capacity_type.value): b.f for b in r.buckets}

    a, b = rows(at_once), rows(one_by_one)
    assert a.keys() == b.keys()
    for key, f in a.items():  # the sums differ only by the wire's rounding to 6 places
        assert f == pytest.approx(b[key], abs=1e-5), key
    assert {(p.uid, tuple(p.attempts), p.gone) for p in at_once.pending} == {
        (p.uid, tuple(p.attempts), p.gone) for p in one_by_one.pending
    }
    assert at_once.gone == one_by_one.gone
    assert [j.uid for j in at_once.jobs] == [j.uid for j in one_by_one.jobs]


def test_a_running_attempt_is_kept_open_and_folded_once_when_its_job_is_gone() -> None:
    running = _cost(0, T0, T0 + 5 * H, close=False)  # 2 devices x 5 h x $3.60 so far, across midnight
    who = rollup.JobId("uid-a", "ns", "a", "research", forecast_usd=50.0)
    (entry,) = rollup.open_attempts(who, running, (), T0 + 5 * H)
    assert entry.through == stamp_exact(T0 + 5 * H)
    assert [d.day for d in entry.days] == ["2026-03-31", "2026-04-01"]
    # The job still exists: nothing is folded from its open attempt.
    assert rollup.vanished([entry], existing={"uid-a"}, skip=()) == []
    # Gone while no operator ran: folded as accrued, with its report row.
    stored = rollup.fold_many(CostRollup(), rollup.vanished([entry], existing=set(), skip=()))
    assert _spent(stored) == pytest.approx(36.0)
    assert sum(b.f[0] for b in stored.buckets if b.day == "2026-03-31") == pytest.approx(4 * 7.2)
    (row,) = stored.jobs
    assert (row.name, row.forecast_usd, row.deleted) == ("a", 50.0, stamp_exact(T0 + 5 * H))
    # A replay (the shard not yet rewritten when the operator was killed) adds nothing.
    again = rollup.fold_many(stored, rollup.vanished([entry], existing=set(), skip=()))
    assert _spent(again) == pytest.approx(36.0)
    # Once folded, the attempt is no longer open.
    assert rollup.open_attempts(who, running, rollup.pending_of(stored)["uid-a"], T0 + 6 * H) == []


def test_a_job_folded_from_its_own_ledger_is_not_folded_from_its_open_attempt_too() -> None:
    running = _cost(0, T0, T0 + 2 * H, close=False)
    who = rollup.JobId("uid-a", "ns", "a", "research")
    entries = rollup.open_attempts(who, running, (), T0 + 2 * H)
    assert rollup.vanished(entries, existing=set(), skip={"uid-a"}) == []  # the deletion path has it
    closed = ledger.close(running, ledger.AttemptEnd(0, T0 + 2.5 * H))
    stored = rollup.fold(CostRollup(), who, closed.attempts, gone=T0 + 2.5 * H, summary=closed)
    after = rollup.fold_many(stored, rollup.vanished(entries, existing=set(), skip=()))
    assert _spent(after) == pytest.approx(_spent(stored))  # the key is pending: not again


def test_the_shards_keep_their_bounds_and_drop_the_smallest_first() -> None:
    def entry(i: int, usd: float) -> OpenAttempt:
        day = JobDay(day="2026-03-31", pool="p" * 60, capacity_type=CapacityType.SPOT, f=[usd, 0, 0, usd, 1, 0, 0])
        return OpenAttempt(
            uid=f"{i:036d}",
            attempt=0,
            namespace="n" * 63,
            name="j" * 200,
            team="t" * 63,
            through="2026-03-31T21:00:00Z",
            days=[day],
        )

    n = 20_000  # more than fit
    shards, dropped = rollup.pack(entry(i, float(i)) for i in range(n))
    assert len(shards) == ROLLUP_OPEN_SHARDS
    assert all(len(open_json(s)) <= ROLLUP_OPEN_BYTES for s in shards)
    kept = [e for s in shards for e in s.attempts]
    assert dropped > 0 and len(kept) + dropped == n
    assert min(e.days[0].f[0] for e in kept) > max(float(i) for i in range(dropped)) - 1  # the smallest went


# What the rollup and an open shard stored before JobSummary and OpenAttempt shared JobFigures
# (byte for byte, from the models of that time): stored ConfigMaps must read the same.
STORED_ROLLUP = (
    '{"revision":3,"buckets":[],"before":[],"jobs":[{"uid":"u1","namespace":"ns","name":"j","team":"t",'
    '"forecastUsd":9.5,"deleted":"2026-11-26T10:00:00Z","days":[{"day":"2026-11-26","pool":"p",'
    '"capacityType":"spot","f":[1.0,0.5,0.0,2.0,3600.0,0.0,0.0]}]}],"pending":[{"uid":"u1","attempts":[0]}]}'
)
STORED_SHARD = (
    '{"attempts":[{"uid":"u2","attempt":1,"namespace":"ns","name":"k","team":"t","through":"2026-11-26T11:00:00Z",'
    '"days":[{"day":"2026-11-26","pool":"p","capacityType":"spot","f":[1.0,0.5,0.0,2.0,3600.0,0.0,0.0]}]}]}'
)


def test_rollup_and_open_shards_stored_earlier_still_read_the_same() -> None:
    rollup = CostRollup.model_validate_json(STORED_ROLLUP)
    (job,) = rollup.jobs
    assert (job.uid, job.name, job.forecast_usd, job.deleted) == ("u1", "j", 9.5, "2026-11-26T10:00:00Z")
    assert job.days[0].f[4] == 3600.0
    shard = OpenShard.model_validate_json(STORED_SHARD)
    (entry,) = shard.attempts
    assert (entry.uid, entry.attempt, entry.name, entry.through) == ("u2", 1, "k", "2026-11-26T11:00:00Z")
    # Written again, the same keys and values (the order of keys is not part of the format); a
    # field added since (the rollup's ``gone`` digests) comes back empty.
    for model, stored in ((rollup, STORED_ROLLUP), (shard, STORED_SHARD)):
        written = json.loads(model.model_dump_json(by_alias=True, exclude_none=True))
        assert written.pop("gone", []) == []
        assert written == json.loads(stored)
