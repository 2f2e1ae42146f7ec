"""The cost ledger's arithmetic and idempotence, property-based: whatever the order, the
repetition or the splitting of the observations, and across a status round trip (a restart),
the figures equal the hand computation."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accel_api.durations import parse_time_strict
from accel_api.enums import CapacityType
from accel_api.job import COST_ATTEMPTS, COST_INTERVALS, CostStatus
from accel_operator.accounting import ledger

T0 = dt.datetime(2026, 3, 31, 22, 0, tzinfo=dt.UTC)
CENT = 0.005


def approx(x: float) -> object:
    """Status figures are rounded to a millionth of a dollar (or device-second)."""
    return pytest.approx(x, abs=2e-6)


def _obs(
    attempt: int, start: float, end: float, price: float, *, devices: int = 8, idle: float = 0.0
) -> ledger.Observation:
    return ledger.Observation(
        attempt=attempt,
        pool="p",
        capacity_type=CapacityType.SPOT,
        devices=devices,
        start=T0 + dt.timedelta(seconds=start),
        end=T0 + dt.timedelta(seconds=end),
        usd_per_device_hour=price,
        on_demand_usd_per_device_hour=10.0,
        idle_fraction=idle,
    )


# A timeline cut into pieces, each at its own price and idle share.
pieces = st.lists(
    st.tuples(
        st.integers(min_value=1, max_value=7200),
        st.sampled_from([0.0, 1.25, 2.5, 3.93, 11.06]),
        st.sampled_from([0.0, 0.25, 1.0]),
    ),
    min_size=1,
    max_size=12,
)


def _timeline(parts: list[tuple[int, float, float]], attempt: int = 0, devices: int = 8) -> list[ledger.Observation]:
    out, t = [], 0
    for seconds, price, idle in parts:
        out.append(_obs(attempt, t, t + seconds, price, devices=devices, idle=idle))
        t += seconds
    return out


def _hand(parts: list[tuple[int, float, float]], devices: int = 8) -> tuple[float, float, float]:
    spent = sum(s * devices / 3600 * p for s, p, _ in parts)
    idle = sum(s * devices / 3600 * p * i for s, p, i in parts)
    return spent, idle, sum(s for s, _, _ in parts) * devices


@settings(max_examples=200, deadline=None)
@given(parts=pieces, data=st.data())
def test_replayed_and_reordered_observations_count_once(
    parts: list[tuple[int, float, float]], data: st.DataObject
) -> None:
    observations = _timeline(parts)
    replays = data.draw(st.lists(st.sampled_from(observations), max_size=10))
    order = data.draw(st.permutations(observations + replays))
    cost: CostStatus | None = None
    for obs in order:
        cost = ledger.record(cost, obs)
    spent, idle, ds = _hand(parts)
    assert cost is not None
    assert cost.spent_usd == approx(spent)
    assert cost.idle_usd == approx(idle)
    assert cost.device_seconds == approx(ds)
    assert cost.on_demand_usd == approx(ds / 3600 * 10.0)
    assert len(cost.attempts[0].intervals) <= len(parts)


@settings(max_examples=100, deadline=None)
@given(parts=pieces, cut=st.integers(min_value=0, max_value=11))
def test_a_restart_reads_the_watermark_and_goes_on(parts: list[tuple[int, float, float]], cut: int) -> None:
    observations = _timeline(parts)
    cut = min(cut, len(observations))
    cost: CostStatus | None = None
    for obs in observations[:cut]:
        cost = ledger.record(cost, obs)
    # What a restarted operator reads back from the API server.
    wire = (cost or CostStatus()).model_dump(by_alias=True, mode="json", exclude_none=True)
    cost = CostStatus.model_validate(wire)
    for obs in observations:  # it does not know which it already counted: it replays all
        cost = ledger.record(cost, obs)
    assert cost.spent_usd == approx(_hand(parts)[0])


@settings(max_examples=100, deadline=None)
@given(seconds=st.integers(min_value=10, max_value=100_000), steps=st.integers(min_value=1, max_value=200))
def test_accruing_up_to_now_in_steps_equals_one_observation(seconds: int, steps: int) -> None:
    """How the operator accrues: [admitted, now] at every tick; only the new part counts."""
    cost: CostStatus | None = None
    for k in range(1, steps + 1):
        cost = ledger.record(cost, _obs(0, 0, seconds * k / steps, 3.0))
    assert cost is not None
    assert cost.spent_usd == approx(8 * seconds / 3600 * 3.0)
    assert len(cost.attempts[0].intervals) == 1


@settings(max_examples=100, deadline=None)
@given(
    run=st.integers(min_value=60, max_value=50_000),
    checkpoint=st.integers(min_value=-100, max_value=50_000),
    overshoot=st.integers(min_value=0, max_value=300),
)
def test_preemption_loses_the_work_since_the_checkpoint(run: int, checkpoint: int, overshoot: int) -> None:
    # The accountant may have accrued a little past the end before it learnt of the preemption.
    cost = ledger.record(None, _obs(0, 0, run + overshoot, 4.0))
    end = ledger.AttemptEnd(
        0, T0 + dt.timedelta(seconds=run), preempted=True, checkpoint=T0 + dt.timedelta(seconds=checkpoint)
    )
    cost = ledger.close(cost, end)
    again = ledger.close(ledger.record(cost, _obs(0, 0, run + 999, 4.0)), end)  # replay: changes nothing
    lost_seconds = min(run, max(0, run - max(0, checkpoint)))
    assert cost.spent_usd == approx(8 * run / 3600 * 4.0)
    assert cost.lost_device_seconds == approx(8 * lost_seconds)
    assert cost.lost_to_preemption_usd == approx(8 * lost_seconds / 3600 * 4.0)
    assert again.model_dump() == cost.model_dump()


def test_reported_lost_device_seconds_win_over_the_checkpoint_and_are_priced_at_the_tail() -> None:
    cost = ledger.record(None, _obs(0, 0, 3600, 2.0, devices=2))
    cost = ledger.record(cost, _obs(0, 3600, 7200, 6.0, devices=2))
    cost = ledger.close(
        cost, ledger.AttemptEnd(0, T0 + dt.timedelta(hours=2), preempted=True, reported_lost_device_seconds=9000)
    )
    # 9000 device-seconds over 2 devices: the last 4500 s, 3600 s at $6 and 900 s at $2.
    assert cost.lost_to_preemption_usd == approx(2 * (3600 * 6 + 900 * 2) / 3600)
    assert cost.spent_usd == approx(2 * (2 + 6))


@settings(max_examples=100, deadline=None)
@given(parts=pieces)
def test_days_and_windows_sum_to_the_totals(parts: list[tuple[int, float, float]]) -> None:
    cost: CostStatus | None = None
    for obs in _timeline(parts):
        cost = ledger.record(cost, obs)
    assert cost is not None
    by_day = ledger.days(cost)
    assert sum(t.spent_usd for t in by_day.values()) == approx(cost.spent_usd)
    month = ledger.period_start("monthly", T0 + dt.timedelta(days=1))  # 1 April: T0 is 31 March, 22:00
    before = ledger.window(cost, T0 - dt.timedelta(days=1), month)
    after = ledger.window(cost, month, T0 + dt.timedelta(days=30))
    assert before.spent_usd + after.spent_usd == approx(cost.spent_usd)
    assert before.device_seconds <= 2 * 3600 * 8


def test_merge_keeps_what_either_ledger_knows() -> None:
    a = ledger.record(None, _obs(0, 0, 100, 1.0))
    b = ledger.close(ledger.record(a, _obs(1, 200, 400, 2.0)), ledger.AttemptEnd(1, T0 + dt.timedelta(seconds=300)))
    merged = ledger.merge(a, b)
    assert merged.spent_usd == approx(8 * (100 * 1.0 + 100 * 2.0) / 3600)
    assert ledger.merge(merged, b).model_dump() == merged.model_dump()
    assert ledger.merge(b, a).spent_usd == approx(merged.spent_usd)


def test_status_stays_bounded_and_keeps_the_money() -> None:
    cost: CostStatus | None = None
    for k in range(40):  # 40 separate pieces of one attempt, each at its own price
        cost = ledger.record(cost, _obs(0, 100 * k, 100 * k + 50, 1.0 + k))
    assert cost is not None
    assert len(cost.attempts[0].intervals) <= COST_INTERVALS
    assert cost.spent_usd == approx(sum(8 * 50 / 3600 * (1.0 + k) for k in range(40)))
    for k in range(40):  # 40 attempts
        cost = ledger.close(
            ledger.record(cost, _obs(k + 1, 0, 10, 1.0)), ledger.AttemptEnd(k + 1, T0 + dt.timedelta(seconds=10))
        )
    assert len(cost.attempts) <= COST_ATTEMPTS
    assert cost.folded is not None
    assert cost.spent_usd == approx(sum(8 * 50 / 3600 * (1.0 + k) for k in range(40)) + 40 * 8 * 10 / 3600)
    CostStatus.model_validate(cost.model_dump(by_alias=True, mode="json"))


@pytest.mark.parametrize(
    ("period", "now", "start"),
    [
        ("daily", "2026-03-04T10:00:00Z", "2026-03-04T00:00:00Z"),
        ("weekly", "2026-03-04T10:00:00Z", "2026-03-02T00:00:00Z"),  # a Wednesday: Monday
        ("monthly", "2026-03-04T10:00:00Z", "2026-03-01T00:00:00Z"),
    ],
)
def test_period_start(period: str, now: str, start: str) -> None:
    assert ledger.period_start(period, parse_time_strict(now)) == parse_time_strict(start)


@settings(max_examples=100, deadline=None)
@given(
    parts=pieces,
    cuts=st.lists(st.integers(min_value=-3600, max_value=90000), min_size=1, max_size=4),
    later=st.lists(st.tuples(st.integers(1, 7200), st.sampled_from([1.25, 3.93]), st.just(0.0)), max_size=3),
    past=st.integers(min_value=-3600, max_value=200_000),
)
def test_windows_in_one_pass_equal_each_window(
    parts: list[tuple[int, float, float]], cuts: list[int], later: list[tuple[int, float, float]], past: int
) -> None:
    cost: CostStatus | None = None
    for obs in _timeline(parts):
        cost = ledger.record(cost, obs)
    length = sum(p[0] for p in parts)
    cost = ledger.close(cost, ledger.AttemptEnd(0, T0 + dt.timedelta(seconds=length), preempted=True))
    for obs in _timeline(later, attempt=1):  # a second attempt after the first, still open
        cost = ledger.record(
            cost,
            dataclasses.replace(
                obs, start=obs.start + dt.timedelta(seconds=length), end=obs.end + dt.timedelta(seconds=length)
            ),
        )
    # The end from before the first attempt's to past everything: a window of an attempt that
    # lies whole inside it is its totals (remembered), of one it cuts, its segments' parts.
    end = T0 + dt.timedelta(seconds=past)
    starts = [T0 + dt.timedelta(seconds=c) for c in cuts]
    for got, start in zip(ledger.windows(cost, starts, end), starts, strict=True):
        assert got == ledger.window(cost, start, end)  # the same sums in the same order: to the bit
