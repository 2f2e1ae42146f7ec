"""Live EC2 spot prices with boto3 (``DescribeSpotPriceHistory`` by instance type and zone),
cached for a TTL: spot prices move a few times a day, and the ledger asks every accrual tick.

``SpotPrices`` is the port (USD per instance-hour); ``Ec2SpotPrices`` asks EC2,
``CachedSpotPrices`` keeps each answer ``ttl_seconds`` (failures are not cached), and
``FakeSpotPrices`` answers from a table, records calls and can be told to fail next.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from accel_operator.adapters.aws.errors import CloudUnavailable

# Linux on-demand-equivalent spot prices; the VPC spelling is what EC2 reports today.
PRODUCTS: Final = ("Linux/UNIX (Amazon VPC)", "Linux/UNIX")
# A price an EC2 answer may carry: bounded like the pools' own prices (per instance, 64 devices).
MAX_INSTANCE_PRICE: Final = 64 * 1000.0


class SpotPrices(Protocol):
    def spot_price(self, instance_type: str, zone: str) -> float: ...  # USD per instance-hour


class Ec2SpotPrices:
    def __init__(self, client: Any) -> None:
        self._client = client  # a boto3 EC2 client

    @classmethod
    def in_region(cls, region: str, endpoint_url: str | None = None) -> Ec2SpotPrices:
        return cls(boto3.client("ec2", region_name=region, endpoint_url=endpoint_url))

    def spot_price(self, instance_type: str, zone: str) -> float:
        """The latest spot price of ``instance_type`` in ``zone``, USD per instance-hour."""
        try:
            answer = self._client.describe_spot_price_history(
                InstanceTypes=[instance_type],
                ProductDescriptions=list(PRODUCTS),
                Filters=[{"Name": "availability-zone", "Values": [zone]}],
                StartTime=dt.datetime.now(dt.UTC) - dt.timedelta(days=1),
                MaxResults=100,
            )
        except (BotoCoreError, ClientError) as exc:
            raise CloudUnavailable(f"spot price of {instance_type} in {zone}: {exc}") from exc
        history = [
            h
            for h in answer.get("SpotPriceHistory", [])
            if h.get("AvailabilityZone") == zone and h.get("InstanceType") == instance_type
        ]
        if not history:
            raise CloudUnavailable(f"no spot price for {instance_type} in {zone}")
        latest = max(history, key=lambda h: str(h.get("Timestamp", "")))
        try:
            price = float(latest["SpotPrice"])
        except (KeyError, TypeError, ValueError) as exc:
            raise CloudUnavailable(f"unreadable spot price for {instance_type} in {zone}") from exc
        if not math.isfinite(price) or not 0 <= price <= MAX_INSTANCE_PRICE:
            raise CloudUnavailable(f"spot price for {instance_type} in {zone} out of range (got {price!r})")
        return price


@dataclass
class CachedSpotPrices:
    source: SpotPrices
    ttl_seconds: float = 300.0
    clock: Callable[[], float] = time.monotonic
    _cache: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)

    def spot_price(self, instance_type: str, zone: str) -> float:
        key = (instance_type, zone)
        hit = self._cache.get(key)
        now = self.clock()
        if hit is not None and now - hit[1] < self.ttl_seconds:
            return hit[0]
        price = self.source.spot_price(instance_type, zone)
        self._cache[key] = (price, now)
        return price


@dataclass
class FakeSpotPrices:
    prices: dict[tuple[str, str], float] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)
    fail_next: Exception | None = None

    def spot_price(self, instance_type: str, zone: str) -> float:
        self.calls.append((instance_type, zone))
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc
        try:
            return self.prices[(instance_type, zone)]
        except KeyError:
            raise CloudUnavailable(f"no spot price for {instance_type} in {zone}") from None


_: SpotPrices = FakeSpotPrices()
_cached: SpotPrices = CachedSpotPrices(FakeSpotPrices())
