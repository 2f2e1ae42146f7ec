"""Cost model: device-hours × price, and what spot preemptions add."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accel_api.enums import CapacityType
from accel_operator.planning import cost
from tests.support.builders import accel, pool

H100 = accel("h100-80gb")
PRICES = cost.Pricing(on_demand_per_device_hour=4.0, spot_per_device_hour=1.5, from_pool=(True, True), accelerator=H100)


def run(
    capacity: CapacityType,
    *,
    rate: float | None = 0.05,
    interval: float | None = 1800,
    nodes: int = 2,
    hours: float = 10,
) -> cost.CostEstimate:
    return cost.estimate(
        duration_seconds=hours * 3600,
        devices=16,
        nodes=nodes,
        capacity_type=capacity,
        prices=PRICES,
        preemption_rate_per_node_hour=rate,
        restart_seconds=300,
        checkpoint_interval_seconds=interval,
    )


def test_on_demand_is_devices_times_hours_times_price() -> None:
    c = run(CapacityType.ON_DEMAND)
    assert c.on_demand_usd == pytest.approx(16 * 10 * 4.0)
    assert c.expected_usd == c.on_demand_usd
    assert c.expected_seconds == 36000 and c.preemptions == 0


def test_spot_pays_for_the_work_preemptions_throw_away() -> None:
    c = run(CapacityType.SPOT)
    lam = 0.05 * 2 / 3600
    wall = 36000 / (1 - lam * (900 + 300))
    assert c.expected_seconds == pytest.approx(wall)
    assert c.expected_usd == pytest.approx(16 * wall / 3600 * 1.5)
    assert c.preemptions == pytest.approx(lam * wall)
    assert c.spot_usd < c.expected_usd < c.on_demand_usd


def test_no_checkpoint_restarts_from_zero() -> None:
    with_ckpt = run(CapacityType.SPOT)
    without = run(CapacityType.SPOT, interval=None)
    assert without.expected_seconds > with_ckpt.expected_seconds
    lam = 0.1 / 3600
    assert without.expected_seconds == pytest.approx((1 / lam + 300) * math.expm1(lam * 36000))


def test_a_spot_pool_without_a_rate_assumes_one_and_says_so() -> None:
    c = run(CapacityType.SPOT, rate=None)
    assert c.preemption_rate_per_node_hour == cost.DEFAULT_SPOT_PREEMPTIONS_PER_NODE_HOUR
    assert c.notes and "assumed" in c.notes[0]


def test_preemptions_faster_than_progress_never_finish() -> None:
    c = run(CapacityType.SPOT, rate=10.0, interval=3600, nodes=8)
    assert math.isinf(c.expected_seconds) and math.isinf(c.expected_usd)


def test_pool_prices_override_the_catalog() -> None:
    own = cost.pricing(pool("p", price=3.0).spec, H100)
    assert own.on_demand_per_device_hour == 3.0
    assert own.spot_per_device_hour == H100.price.spot_per_device_hour
    assert "pool spec" in own.source and "as of" in own.source
    listed = cost.pricing(pool("p").spec, H100)
    assert listed.on_demand_per_device_hour == H100.price.on_demand_per_device_hour
    assert listed.source.startswith("catalog list price as of")


@settings(max_examples=60, deadline=None)
@given(
    hours=st.floats(0, 1e4, allow_subnormal=False),
    devices=st.integers(1, 1024),
    nodes=st.integers(1, 128),
    rate=st.one_of(st.none(), st.floats(0, 5, allow_subnormal=False)),
    interval=st.one_of(st.none(), st.floats(1, 1e4)),
    spot=st.booleans(),
)
def test_cost_is_never_negative(
    hours: float, devices: int, nodes: int, rate: float | None, interval: float | None, spot: bool
) -> None:
    c = cost.estimate(
        duration_seconds=hours * 3600,
        devices=devices,
        nodes=nodes,
        capacity_type=CapacityType.SPOT if spot else CapacityType.ON_DEMAND,
        prices=PRICES,
        preemption_rate_per_node_hour=rate,
        restart_seconds=300,
        checkpoint_interval_seconds=interval,
    )
    assert c.on_demand_usd >= 0 and c.spot_usd >= 0 and c.expected_usd >= 0
    assert c.expected_seconds >= hours * 3600 * (1 - 1e-12)


def test_a_spot_pool_notice_comes_from_its_provider() -> None:
    assert cost.pricing(pool("p", spot=True).spec, H100).notice_seconds == 120.0  # AWS: two minutes
    tpu = accel("tpu-v5e")
    assert cost.pricing(pool("t", "tpu-v5e", spot=True).spec, tpu).notice_seconds == 30.0  # GKE: about 30 s
    assert cost.pricing(pool("o").spec, H100).notice_seconds == 0.0  # on-demand: no notice


def test_a_notice_saves_all_but_its_lead_and_the_restart() -> None:
    noticed = PRICES._replace(notice_seconds=120.0)
    c = cost.PoolCost(CapacityType.SPOT, noticed, 0.05, 300, 1800).estimate(36000, 16, 2)
    lam = 0.05 * 2 / 3600
    assert c.expected_seconds == pytest.approx(36000 / (1 - lam * (120 + 300)))  # not 900 + 300
    assert any("120 s preemption notice" in n for n in c.notes)  # the plan says why
    # A lead longer than half the interval saves nothing more than the interval does.
    long = cost.PoolCost(CapacityType.SPOT, PRICES._replace(notice_seconds=3000.0), 0.05, 300, 1800)
    assert long.estimate(36000, 16, 2).expected_seconds == pytest.approx(run(CapacityType.SPOT).expected_seconds)
    # Without a checkpoint there is nothing to save on the notice.
    bare = cost.PoolCost(CapacityType.SPOT, noticed, 0.05, 300, None).estimate(36000, 16, 2)
    assert bare.expected_seconds == pytest.approx(run(CapacityType.SPOT, interval=None).expected_seconds)
