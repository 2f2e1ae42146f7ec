"""Cost model: dollars and wall time of one placement, with spot preemptions priced in.

Every device is billed for the whole wall time, including the work a preemption throws away.
On spot capacity, preemptions arrive at the pool's rate per node-hour, on every node the job
holds. With a checkpoint every τ, each preemption loses about τ/2 of work plus the restart
time R, so the wall time T solves T = D + λ·T·(τ/2 + R) (λ: preemptions per hour for the job).
Without a checkpoint a preemption restarts the job from zero: E[T] = (1/λ + R)(e^{λD} − 1).

A spot pool whose cloud gives notice before it reclaims a node (AWS: two minutes; GKE: about 30 s,
``notice_seconds``) lets a checkpointed job save on the notice (the operator asks it to: docs/
rescheduling.md, Early warnings); such a preemption loses the restart plus the work of the lead
that cannot be saved, min(τ/2, L), instead of τ/2.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

from accel_api.catalog import Accelerator
from accel_api.enums import CapacityType, Provider
from accel_api.pool import AcceleratorPoolSpec

HOUR = 3600.0
# Used for a spot pool that states no preemption rate and has no observed one: a typical
# interruption rate for GPU spot capacity (about one per node-day).
DEFAULT_SPOT_PREEMPTIONS_PER_NODE_HOUR = 0.05
# Seconds of notice a spot pool's cloud gives before it reclaims a node. AWS: "a two-minute
# warning before Amazon EC2 stops or terminates your Spot Instance" (EC2 User Guide, Spot Instance
# interruption notices). Google Cloud: "Compute Engine sends a preemption notice ... 30 seconds"
# before it stops a Spot VM (Compute Engine docs, Spot VMs, Preemption process; GKE passes it on).
# On-premises pools and on-demand capacity get none.
SPOT_NOTICE_SECONDS: Mapping[Provider, float] = MappingProxyType({Provider.AWS: 120.0, Provider.GCP: 30.0})


def notice_seconds(pool: AcceleratorPoolSpec) -> float:
    """The lead time a pool's cloud gives before a spot preemption (0: none, or not spot)."""
    if pool.capacity_type is CapacityType.ON_DEMAND:
        return 0.0
    return SPOT_NOTICE_SECONDS.get(pool.provider, 0.0)


class Pricing(NamedTuple):
    """Immutable; a NamedTuple because plan() builds one per pool."""

    on_demand_per_device_hour: float
    spot_per_device_hour: float
    from_pool: tuple[bool, bool]  # (on-demand, spot) stated by the pool, else the catalog's
    accelerator: Accelerator
    # The pool's spot notice lead time (``notice_seconds``): carried with the prices because the
    # planner builds one Pricing per pool and prices every candidate of that pool from it.
    notice_seconds: float = 0.0

    @property
    def source(self) -> str:
        price = self.accelerator.price
        catalog = f"catalog list price as of {price.as_of}, {price.source}"
        if (price.spot_as_of, price.spot_source) != (price.as_of, price.source):
            catalog += f"; spot as of {price.spot_as_of}, {price.spot_source}"
        if all(self.from_pool):
            return "pool spec"
        if not any(self.from_pool):
            return catalog
        return f"pool spec, else {catalog}"

    def per_device_hour(self, capacity: CapacityType) -> float:
        return self.spot_per_device_hour if capacity is CapacityType.SPOT else self.on_demand_per_device_hour


def pricing(pool: AcceleratorPoolSpec, accel: Accelerator) -> Pricing:
    """The pool's own prices where it states them, else the catalog's list prices."""
    od, spot = pool.price.on_demand_per_device_hour, pool.price.spot_per_device_hour
    return Pricing(
        on_demand_per_device_hour=od if od is not None else accel.price.on_demand_per_device_hour,
        spot_per_device_hour=spot if spot is not None else accel.price.spot_per_device_hour,
        from_pool=(od is not None, spot is not None),
        accelerator=accel,
        notice_seconds=notice_seconds(pool),
    )


class CostEstimate(NamedTuple):
    """Immutable; a NamedTuple because plan() builds one per candidate."""

    on_demand_usd: float  # devices × duration × on-demand price, no preemptions
    spot_usd: float  # devices × duration × spot price, no preemptions
    expected_usd: float  # on the pool's capacity type, preemption losses included
    expected_seconds: float  # wall time, preemption losses included (inf: never finishes)
    preemptions: float  # expected number of preemptions
    preemption_rate_per_node_hour: float
    capacity_type: CapacityType
    notes: tuple[str, ...] = ()


def estimate(
    *,
    duration_seconds: float,
    devices: int,
    nodes: int,
    capacity_type: CapacityType,
    prices: Pricing,
    preemption_rate_per_node_hour: float | None,
    restart_seconds: float,
    checkpoint_interval_seconds: float | None,
) -> CostEstimate:
    """Cost of running ``devices`` for ``duration_seconds`` of useful work."""
    pool = PoolCost(capacity_type, prices, preemption_rate_per_node_hour, restart_seconds, checkpoint_interval_seconds)
    return pool.estimate(duration_seconds, devices, nodes)


# Builds a NamedTuple from all its fields without its keyword-handling __new__ (twice as fast).
_new = tuple.__new__


class PoolCost:
    """The cost model with one pool's terms resolved once (the planner prices every device count
    of a pool with it: a hot path)."""

    __slots__ = (
        "_capacity",
        "_interval",
        "_notes",
        "_notice",
        "_od",
        "_rate",
        "_restart",
        "_spot",
        "_spot_pool",
        "terms",
    )

    def __init__(
        self,
        capacity_type: CapacityType,
        prices: Pricing,
        preemption_rate_per_node_hour: float | None,
        restart_seconds: float,
        checkpoint_interval_seconds: float | None,
    ) -> None:
        self._capacity = capacity_type
        self._spot_pool = capacity_type is not CapacityType.ON_DEMAND
        self._od = prices.on_demand_per_device_hour / HOUR
        self._spot = prices.spot_per_device_hour / HOUR
        rate = preemption_rate_per_node_hour
        notes: tuple[str, ...] = ()
        if rate is None:
            rate = DEFAULT_SPOT_PREEMPTIONS_PER_NODE_HOUR
            notes = (f"assumed {rate:g} preemptions per node-hour (the pool states none)",)
        notice = prices.notice_seconds
        if self._spot_pool and notice > 0 and checkpoint_interval_seconds is not None:
            notes = (
                *notes,
                f"checkpoint saved on the cloud's {notice:g} s preemption notice: a preemption loses the "
                f"restart plus at most {min(notice, checkpoint_interval_seconds / 2):g} s of work",
            )
        self._rate = rate
        self._notes = notes
        self._restart = restart_seconds
        self._interval = checkpoint_interval_seconds
        self._notice = prices.notice_seconds
        # Everything estimate() reads: two pools with equal terms give equal estimates, so the
        # planner prices a device count once for all of them.
        self.terms = (
            capacity_type,
            self._od,
            self._spot,
            rate,
            notes,
            restart_seconds,
            checkpoint_interval_seconds,
            self._notice,
        )

    def estimate(self, duration_seconds: float, devices: int, nodes: int) -> CostEstimate:
        """Cost of running ``devices`` on ``nodes`` for ``duration_seconds`` of useful work."""
        device_seconds = devices * duration_seconds
        on_demand = device_seconds * self._od
        spot = device_seconds * self._spot
        if not self._spot_pool:
            return _new(CostEstimate, (on_demand, spot, on_demand, duration_seconds, 0.0, 0.0, self._capacity, ()))
        rate = self._rate
        lam = rate * nodes / HOUR  # preemptions per second for the whole job
        if lam <= 0:
            wall = duration_seconds
        elif self._interval is not None:
            # Saved on the notice: only the lead's own work is lost, if less than half an interval.
            unsaved = self._interval / 2
            if self._notice > 0:
                unsaved = min(unsaved, self._notice)
            lost_per_preemption = unsaved + self._restart
            overhead = lam * lost_per_preemption
            wall = duration_seconds / (1 - overhead) if overhead < 1 else math.inf
        else:
            # (1/λ + r)(e^{λT} − 1), written as T·(e^x − 1)/x + r(e^x − 1) with x = λT so that a
            # tiny λ neither divides to infinity nor loses the T term to rounding.
            x = lam * duration_seconds
            if x >= 700:
                wall = math.inf
            else:
                growth = math.expm1(x) / x if x > 1e-12 else 1.0
                wall = duration_seconds * growth + self._restart * math.expm1(x)
        preemptions = lam * wall if math.isfinite(wall) else math.inf
        expected = devices * wall * self._spot
        return _new(CostEstimate, (on_demand, spot, expected, wall, preemptions, rate, self._capacity, self._notes))
