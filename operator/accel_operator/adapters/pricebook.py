"""The price in force for a pool now: the pool's own numbers or the catalog's list prices
(``source: static``), or the cloud's live figure (``source: live``) — EC2 spot prices by
instance type and zone, TPU accelerator types offered in the zone (priced from the catalog: the
TPU API carries no prices). A live source that fails, or that has nothing for the pool, falls
back to the static price; the quote says so (a condition on the pool, a metric).

The ports are structural (:class:`SpotPriceSource`, :class:`TpuTypeSource`), so this module
imports no SDK: ``adapters.aws.prices`` and ``adapters.gcp.tpu`` satisfy them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol

from accel_api.catalog import Accelerator
from accel_api.enums import CapacityType, PriceSource, Provider
from accel_api.pool import AcceleratorPoolSpec
from accel_operator.planning import cost as cost_model

# Catalog TPU ids and the prefix of the TPU API's accelerator types for them.
TPU_TYPE_PREFIX: Final = {"tpu-v4": "v4-", "tpu-v5e": "v5litepod-", "tpu-v5p": "v5p-", "tpu-v6e": "v6e-"}


class SpotPriceSource(Protocol):
    def spot_price(self, instance_type: str, zone: str) -> float: ...  # USD per instance-hour


class TpuTypeSource(Protocol):
    def accelerator_types(self, project: str, zone: str) -> frozenset[str]: ...


@dataclass(frozen=True, slots=True)
class Quote:
    usd_per_device_hour: float  # for the pool's capacity type
    on_demand_usd_per_device_hour: float
    source: str  # "live", "pool", "catalog"
    fallback: str | None = None  # why a live source was not used, when the pool asked for one


@dataclass
class PriceBook:
    spot: SpotPriceSource | None = None
    tpu: TpuTypeSource | None = None
    gcp_project: str = ""

    def quote(self, pool: AcceleratorPoolSpec, accel: Accelerator) -> Quote:
        static = cost_model.pricing(pool, accel)
        od = static.on_demand_per_device_hour
        price = static.per_device_hour(pool.capacity_type)
        stated = static.from_pool[1 if pool.capacity_type is CapacityType.SPOT else 0]
        base = Quote(price, od, "pool" if stated else "catalog")
        if pool.price.source is not PriceSource.LIVE:
            return base
        if pool.provider is Provider.AWS:
            return self._aws(pool, base)
        if pool.provider is Provider.GCP:
            return self._gcp(pool, accel, base)
        return _fallback(base, f"no live price source for provider {pool.provider.value}")

    def _aws(self, pool: AcceleratorPoolSpec, base: Quote) -> Quote:
        if pool.capacity_type is not CapacityType.SPOT:
            return base  # on-demand list prices do not move: the static price is the live one
        if self.spot is None:
            return _fallback(base, "no EC2 spot price source configured")
        if not pool.instance_type or not pool.zone:
            return _fallback(base, "the pool names no instanceType and zone")
        try:
            per_instance = self.spot.spot_price(pool.instance_type, pool.zone)
        except Exception as exc:  # noqa: BLE001 - any failure of a price source means: use the static price
            return _fallback(base, f"EC2 spot price unavailable: {str(exc)[:200]}")
        return Quote(min(per_instance / pool.devices_per_node, 1000.0), base.on_demand_usd_per_device_hour, "live")

    def _gcp(self, pool: AcceleratorPoolSpec, accel: Accelerator, base: Quote) -> Quote:
        prefix = TPU_TYPE_PREFIX.get(accel.id)
        if prefix is None:
            return _fallback(base, f"no live price source for {accel.id} on GCP")
        if self.tpu is None or not self.gcp_project:
            return _fallback(base, "no TPU API source configured")
        if not pool.zone:
            return _fallback(base, "the pool names no zone")
        try:
            types = self.tpu.accelerator_types(self.gcp_project, pool.zone)
        except Exception as exc:  # noqa: BLE001 - any failure of a price source means: use the static price
            return _fallback(base, f"TPU API unavailable: {str(exc)[:200]}")
        if not any(t.startswith(prefix) for t in types):
            return _fallback(base, f"zone {pool.zone} offers no {prefix}* TPU types")
        return Quote(base.usd_per_device_hour, base.on_demand_usd_per_device_hour, "live")


def _fallback(base: Quote, why: str) -> Quote:
    return Quote(base.usd_per_device_hour, base.on_demand_usd_per_device_hour, base.source, why)
