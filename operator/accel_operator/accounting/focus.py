"""The cost report as FinOps FOCUS rows (FinOps Open Cost and Usage Specification, version 1.1),
which finance tools ingest: one Usage row per job attempt, pool and capacity type for the part of
the attempt inside the report's window, and one per deleted job's day and pool (from the cost
rollup). Pure: the CLI writes the CSV.

The money is the report's: the rows cover what ``--by job`` counts, so ``BilledCost`` sums to its
total (and to the team and pool totals, which equal it for any window that starts and ends on a
UTC day; see docs/cost.md). The operator issues no invoice: the billing period is the report's
window, the billing account a fixed name, and the provider, publisher and invoice issuer are the
cloud the pool runs on (``onprem`` pools: the organisation's own hardware).

Columns: every column that FOCUS 1.1 makes Mandatory, and of its Conditional and Recommended ones
those this data can fill (``ConsumedQuantity``/``Unit``, ``PricingCategory``, ``Resource*``,
``SubAccount*``, ``Region*``, ``AvailabilityZone``, ``SkuId``, unit prices, ``Tags``); figures of
our own are ``x_``-prefixed, as the specification asks of custom columns. Values: datetimes in
ISO 8601 UTC (``2026-11-27T18:00:00Z``); costs and quantities as plain decimals;
``ChargeCategory`` ``Usage``; ``ChargeClass`` empty (null: no corrections); ``PricingCategory``
``Dynamic`` for spot capacity (a price the provider sets and moves) and ``Standard`` for
on-demand; ``ServiceCategory`` ``Compute``.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from typing import Final

from accel_api.costrollup import CostRollup
from accel_api.enums import CapacityType, Provider
from accel_operator.accounting import ledger, rollup
from accel_operator.accounting.costreport import JobCost
from accel_operator.accounting.pricesources import CURRENCY, Pool

VERSION: Final = "1.1"
COLUMNS: Final = (
    "AvailabilityZone",
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingCurrency",
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargeFrequency",
    "ChargePeriodEnd",
    "ChargePeriodStart",
    "ConsumedQuantity",
    "ConsumedUnit",
    "ContractedCost",
    "ContractedUnitPrice",
    "EffectiveCost",
    "InvoiceIssuerName",
    "ListCost",
    "ListUnitPrice",
    "PricingCategory",
    "PricingQuantity",
    "PricingUnit",
    "ProviderName",
    "PublisherName",
    "RegionId",
    "RegionName",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "ServiceCategory",
    "ServiceName",
    "SkuId",
    "SubAccountId",
    "SubAccountName",
    "Tags",
    "x_LostToPreemptionCost",
    "x_IdleCost",
    "x_Pool",
)
BILLING_ACCOUNT: Final = "accel-operator"
SERVICE: Final = "Accelerator jobs (accel-operator)"
UNIT: Final = "Device-Hours"
_PROVIDER: Final = {Provider.AWS: "Amazon Web Services", Provider.GCP: "Google Cloud", Provider.ONPREM: "On-premises"}


def stamp(t: dt.datetime) -> str:
    """ISO 8601 in UTC, to the second, with ``Z``: the form FOCUS's datetime columns use."""
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def decimal(x: float) -> str:
    """A plain decimal (no exponent), to a millionth of a dollar or device-hour."""
    return f"{x:.6f}"


def rows(
    jobs: Iterable[JobCost],
    window: tuple[dt.datetime, dt.datetime],
    pools: Mapping[str, Pool],
    folded: CostRollup | None = None,
) -> list[dict[str, str]]:
    start, end = window
    out: list[dict[str, str]] = []
    live: set[str] = set()
    for job in jobs:
        live.add(job.uid)
        for entry in job.cost.attempts:
            t = ledger.Figures()
            first: dt.datetime | None = None
            last: dt.datetime | None = None
            for seg in ledger.segments(entry):
                if seg.end > start and seg.start < end:
                    t = t + seg.totals(start, end)
                    lo, hi = max(seg.start, start), min(seg.end, end)
                    first = lo if first is None else min(first, lo)
                    last = hi if last is None else max(last, hi)
            if first is None or last is None or (t.device_seconds <= 0 and t.spent_usd <= 0):
                continue
            what = (
                f"{entry.devices} device(s) in pool {entry.pool} ({entry.capacity_type.value}), "
                f"attempt {entry.attempt} of job {job.namespace}/{job.name}"
            )
            out.append(
                _row(
                    window, (first, last), t, pools.get(entry.pool), entry.pool, entry.capacity_type,
                    (job.uid or f"{job.namespace}/{job.name}", job.namespace, job.name, job.team), what,
                    {"attempt": str(entry.attempt)},
                )
            )  # fmt: skip
    for s in folded.jobs if folded is not None else ():
        if s.uid in live:
            continue
        for d in s.days:
            if not rollup.in_window(d.day, start, end):
                continue
            lo = dt.datetime.combine(dt.date.fromisoformat(d.day), dt.time(), dt.UTC)
            what = f"deleted job {s.namespace}/{s.name} in pool {d.pool} ({d.capacity_type.value}), day {d.day}"
            out.append(
                _row(
                    window, (lo, lo + dt.timedelta(days=1)), rollup.figures(d.f), pools.get(d.pool), d.pool,
                    d.capacity_type, (s.uid, s.namespace, s.name, s.team), what, {"deleted": "true"},
                )
            )  # fmt: skip
    return out


def _row(  # noqa: PLR0917 - one call per kind of row; every argument is named there
    window: tuple[dt.datetime, dt.datetime],
    charge: tuple[dt.datetime, dt.datetime],
    t: ledger.Figures,
    pool: Pool | None,
    pool_name: str,
    capacity: CapacityType,
    who: tuple[str, str, str, str],
    what: str,
    tags: dict[str, str],
) -> dict[str, str]:
    uid, namespace, name, team = who
    hours = t.device_seconds / 3600
    spec = pool.spec if pool is not None else None
    provider = _PROVIDER[spec.provider] if spec is not None else "Unknown"
    accelerator = spec.accelerator if spec is not None else ""
    return {
        "AvailabilityZone": (spec.zone or "") if spec is not None else "",
        "BilledCost": decimal(t.spent_usd),
        "BillingAccountId": BILLING_ACCOUNT,
        "BillingAccountName": BILLING_ACCOUNT,
        "BillingCurrency": CURRENCY,
        "BillingPeriodEnd": stamp(window[1]),
        "BillingPeriodStart": stamp(window[0]),
        "ChargeCategory": "Usage",
        "ChargeClass": "",
        "ChargeDescription": what[:512],
        "ChargeFrequency": "Usage-Based",
        "ChargePeriodEnd": stamp(charge[1]),
        "ChargePeriodStart": stamp(charge[0]),
        "ConsumedQuantity": decimal(hours),
        "ConsumedUnit": UNIT,
        "ContractedCost": decimal(t.spent_usd),
        "ContractedUnitPrice": decimal(t.spent_usd / hours) if hours > 0 else "",
        "EffectiveCost": decimal(t.spent_usd),
        "InvoiceIssuerName": provider,
        "ListCost": decimal(t.on_demand_usd),
        "ListUnitPrice": decimal(t.on_demand_usd / hours) if hours > 0 else "",
        "PricingCategory": "Dynamic" if capacity is CapacityType.SPOT else "Standard",
        "PricingQuantity": decimal(hours),
        "PricingUnit": UNIT,
        "ProviderName": provider,
        "PublisherName": provider,
        "RegionId": (spec.region or "") if spec is not None else "",
        "RegionName": (spec.region or "") if spec is not None else "",
        "ResourceId": uid,
        "ResourceName": f"{namespace}/{name}",
        "ResourceType": "AcceleratorJob",
        "ServiceCategory": "Compute",
        "ServiceName": SERVICE,
        "SkuId": f"{accelerator}:{capacity.value}" if accelerator else "",
        "SubAccountId": team,
        "SubAccountName": team,
        "Tags": json.dumps(
            {"team": team, "namespace": namespace, "job": name, "pool": pool_name, **tags}, sort_keys=True
        ),
        "x_LostToPreemptionCost": decimal(t.lost_to_preemption_usd),
        "x_IdleCost": decimal(t.idle_usd),
        "x_Pool": pool_name,
    }
