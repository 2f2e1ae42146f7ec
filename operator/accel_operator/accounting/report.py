"""A cost report as every output format says it: the rows and their total, the period, the
currency, where the prices came from, the budgets (and, for the FOCUS rows and the charts, the
jobs, the rollup and the pools it was computed from)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from accel_api.costrollup import CostRollup
from accel_operator.accounting import costreport, focus
from accel_operator.accounting.costreport import By, JobCost, Row
from accel_operator.accounting.pricesources import CURRENCY, Pool, PriceLine


class Report:
    """What every output format says: the rows and their total, the period, the currency, the
    prices' sources, the budgets."""

    def __init__(
        self,
        *,
        by: By,
        window: tuple[dt.datetime, dt.datetime],
        rows: list[Row],
        prices: list[PriceLine],
        budgets: list[dict[str, Any]],
        namespace: str | None,
    ) -> None:
        self.by, self.window, self.rows, self.prices, self.budgets = by, window, rows, prices, budgets
        self.namespace = namespace
        self.total = costreport.total(rows)
        self.jobs: list[JobCost] = []
        self.folded: CostRollup | None = None
        self.pools: dict[str, Pool] = {}

    def period(self) -> str:
        start, end = self.window
        scope = f"namespace {self.namespace}" if self.namespace else "all namespaces"
        return f"Cost by {self.by.value}, {focus.stamp(start)} to {focus.stamp(end)} (UTC), in {CURRENCY}; {scope}"
