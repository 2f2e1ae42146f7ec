"""Where the prices of a cost report came from: per pool and capacity type that spent in the
window, the prices the ledgers recorded and their source — the pool's own figure, the catalog's
list price with its ``asOf``/``source``, or the live adapter (with the time the prices were
recorded and the pool's ``PriceLive`` condition). Pure: the CLI reads the pools and the catalog.

The ledger keeps the price in force for every interval, not its source; the source is what the
pool says *now* (a pool whose spec or catalog changed since is described as it is now, and the
report says so). A pool that no longer exists, or that the reader may not see, is listed with
the prices the ledgers recorded and an unknown source, never left out.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from accel_api.catalog import Catalog
from accel_api.costrollup import CostRollup
from accel_api.enums import CapacityType, PriceSource, Provider
from accel_api.pool import AcceleratorPoolSpec
from accel_operator.accounting import ledger, rollup
from accel_operator.accounting.costreport import JobCost
from accel_operator.planning import cost as cost_model

CURRENCY = "USD"  # every price in the catalog, the pools and the ledgers


@dataclass(frozen=True, slots=True)
class Pool:
    """An AcceleratorPool as the report reads it: its spec and its ``PriceLive`` condition."""

    spec: AcceleratorPoolSpec
    price_live: Mapping[str, Any] | None = None  # the condition, as the API returns it


@dataclass(frozen=True, slots=True)
class PriceLine:
    pool: str
    capacity_type: CapacityType
    accelerator: str | None
    low: float | None  # the lowest and highest USD per device-hour recorded in the window
    high: float | None
    kind: str  # "pool spec", "catalog", "live", "live, fell back to static", "unknown"
    source: str
    as_of: str
    on_demand_source: str  # of the on-demand figure that "on demand" and "spot saved" compare with
    on_demand_as_of: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "capacityType": self.capacity_type.value,
            "accelerator": self.accelerator,
            "currency": CURRENCY,
            "usdPerDeviceHourLow": None if self.low is None else round(self.low, 6),
            "usdPerDeviceHourHigh": None if self.high is None else round(self.high, 6),
            "kind": self.kind,
            "source": self.source,
            "asOf": self.as_of,
            "onDemandSource": self.on_demand_source,
            "onDemandAsOf": self.on_demand_as_of,
        }


_UNDATED = "not dated (the pool's own figure, as its spec says now)"


def lines(
    jobs: Iterable[JobCost],
    window: tuple[dt.datetime, dt.datetime],
    pools: Mapping[str, Pool],
    catalog: Catalog,
    folded: CostRollup | None = None,
) -> list[PriceLine]:
    """One line per (pool, capacity type) that spent in ``window``, sorted by pool."""
    start, end = window
    seen: dict[tuple[str, CapacityType], list[tuple[float, dt.datetime, dt.datetime]]] = {}
    for job in jobs:
        for entry in job.cost.attempts:
            for seg in ledger.segments(entry):
                if seg.end > start and seg.start < end:
                    seen.setdefault((entry.pool, entry.capacity_type), []).append(
                        (seg.price, max(seg.start, start), min(seg.end, end))
                    )
    for b in folded.buckets if folded is not None else ():
        if rollup.in_window(b.day, start, end):
            seen.setdefault((b.pool, b.capacity_type), [])
    for s in folded.jobs if folded is not None else ():
        for d in s.days:
            if rollup.in_window(d.day, start, end):
                seen.setdefault((d.pool, d.capacity_type), [])
    return [_line(pool, capacity, seen[pool, capacity], pools.get(pool), catalog) for pool, capacity in sorted(seen)]


def _stamp(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _line(
    name: str,
    capacity: CapacityType,
    recorded: list[tuple[float, dt.datetime, dt.datetime]],
    pool: Pool | None,
    catalog: Catalog,
) -> PriceLine:
    low = min((p for p, _, _ in recorded), default=None)
    high = max((p for p, _, _ in recorded), default=None)
    when = (
        f"recorded {_stamp(min(s for _, s, _ in recorded))} to {_stamp(max(e for _, _, e in recorded))}"
        if recorded
        else "recorded in the cost rollup (deleted jobs)"
    )
    accel = catalog.get(pool.spec.accelerator) if pool is not None else None
    if pool is None or accel is None:
        why = (
            "the pool no longer exists or is not readable" if pool is None else "its accelerator is not in the catalog"
        )
        source = f"{why}; the prices are those the ledgers recorded"
        return PriceLine(
            name, capacity, None if pool is None else pool.spec.accelerator, low, high, "unknown", source, when,
            "unknown", "unknown",
        )  # fmt: skip
    spec = pool.spec
    pricing = cost_model.pricing(spec, accel)
    price = accel.price
    if pricing.from_pool[0]:
        od_source, od_as_of = f"AcceleratorPool {name} spec.price.onDemandPerDeviceHour", _UNDATED
    else:
        od_source, od_as_of = f"{price.source} (catalog {catalog.source})", price.as_of
    spot = capacity is CapacityType.SPOT
    if spot and pricing.from_pool[1]:
        kind, source, as_of = "pool spec", f"AcceleratorPool {name} spec.price.spotPerDeviceHour", _UNDATED
    elif spot:
        kind, source, as_of = "catalog", f"{price.spot_source} (catalog {catalog.source})", price.spot_as_of
    else:
        kind, source, as_of = ("pool spec" if pricing.from_pool[0] else "catalog"), od_source, od_as_of
    if spec.price.source is PriceSource.LIVE:
        adapter = _adapter(spec, capacity)
        cond = pool.price_live or {}
        state = (
            f"; PriceLive={str(cond.get('status', '?'))[:8]} ({str(cond.get('reason', ''))[:64]}) "
            f"since {str(cond.get('lastTransitionTime', '?'))[:32]}"
            if cond
            else "; no PriceLive condition on the pool"
        )
        if cond.get("status") == "False":
            kind, source = "live, fell back to static", f"{adapter}, fell back to {source}"
        else:
            kind, source = "live", adapter
        return PriceLine(name, capacity, accel.id, low, high, kind, source, f"{when}{state}", od_source, od_as_of)
    return PriceLine(name, capacity, accel.id, low, high, kind, source, as_of, od_source, od_as_of)


def _adapter(spec: AcceleratorPoolSpec, capacity: CapacityType) -> str:
    if spec.provider is Provider.AWS and capacity is CapacityType.SPOT:
        return (
            f"EC2 DescribeSpotPriceHistory ({spec.instance_type or '?'} in {spec.zone or '?'}) "
            f"per instance / {spec.devices_per_node} devices"
        )
    if spec.provider is Provider.AWS:
        return "AWS on-demand list price (does not move: the catalog's or the pool's figure)"
    if spec.provider is Provider.GCP:
        return "Cloud TPU API (the type offered in the zone); the figure is the catalog's"
    return f"no live source for provider {spec.provider.value}; the static figure"
