"""The cost report as finance reads it: a totals row, the period and the currency in every format;
where every price came from (the catalog's ``asOf``/``source``, the pool's own figure, the live
adapter and its time) in the report and in ``-o json``; the forecast labelled as the whole job's,
beside the whole job's spending to date; the FinOps FOCUS export checked against the
specification's columns and value formats; and progress on stderr that never touches stdout."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from accel_api import catalog
from accel_api.enums import CapacityType
from accel_api.job import CostStatus
from accel_operator.accounting import ledger
from accel_operator.cli.main import main

H = dt.timedelta(hours=1)


def _ledger(pool: str, capacity: CapacityType, hours: float, price: float, *, ended_ago: float = 1.0) -> CostStatus:
    # Now: when the fixture runs, just before the test (a module-level time would age in a long run).
    start = dt.datetime.now(dt.UTC) - (hours + ended_ago) * H
    end = start + hours * H
    cost = ledger.record(None, ledger.Observation(0, pool, capacity, 4, start, end, price, 10.0))
    cost = ledger.close(cost, ledger.AttemptEnd(0, end))
    return cost.model_copy(update={"forecast_usd": 1000.0})


def _job(ns: str, name: str, team: str, cost: CostStatus) -> dict[str, Any]:
    return {
        "apiVersion": "accel.dev/v1alpha1",
        "kind": "AcceleratorJob",
        "metadata": {"namespace": ns, "name": name, "uid": f"uid-{name}"},
        "spec": {"team": team},
        "status": {"cost": cost.model_dump(by_alias=True, mode="json", exclude_none=True)},
    }


def _pool(name: str, capacity: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "accel.dev/v1alpha1",
        "kind": "AcceleratorPool",
        "metadata": {"name": name},
        "spec": {
            "provider": "aws",
            "accelerator": "h100-80gb",
            "devicesPerNode": 8,
            "capacityType": capacity,
            "region": "us-east-1",
            "zone": "us-east-1a",
            **spec,
        },
    }


LIVE_SINCE = "2026-11-20T08:00:00Z"


@pytest.fixture
def world(tmp_path: Path) -> Path:
    """Four jobs on four pools: spot at the catalog's price, on-demand at the pool's own price,
    spot at a live EC2 price, and a pool that no longer exists. Each ran 10 hours, ending an hour ago."""
    live = _pool("live-spot", "spot", instanceType="p5.48xlarge", price={"source": "live"})
    live["status"] = {
        "conditions": [{"type": "PriceLive", "status": "True", "reason": "LivePrice", "lastTransitionTime": LIVE_SINCE}]
    }
    items = [
        _job("research", "llama", "research", _ledger("cat-spot", CapacityType.SPOT, 10, 2.5)),
        _job("research", "eval", "research", _ledger("own-od", CapacityType.ON_DEMAND, 10, 10.0)),
        _job("search", "ranker", "search", _ledger("live-spot", CapacityType.SPOT, 10, 3.0)),
        _job("search", "old", "search", _ledger("gone-pool", CapacityType.ON_DEMAND, 10, 6.0)),
        _pool("cat-spot", "spot"),
        _pool("own-od", "on-demand", price={"onDemandPerDeviceHour": 10.0}),
        live,
    ]
    path = tmp_path / "world.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


# 4 devices × 10 h at 2.5, 10, 3 and 6 USD per device-hour.
TOTAL = 4 * 10 * (2.5 + 10.0 + 3.0 + 6.0)


def _out(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["cost", "report", *argv]) == 0
    return capsys.readouterr().out


def test_totals_row_period_and_currency_in_every_format(world: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ("--from-file", str(world), "--since", "2d")
    period = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ to \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(UTC\), in USD")

    table = _out(capsys, *args).splitlines()
    assert period.search(table[0]), table[0]
    total = next(line for line in table if line.startswith("TOTAL"))
    assert f"${TOTAL:,.2f}" in total.split()[1]

    data = json.loads(_out(capsys, *args, "-o", "json"))
    assert data["currency"] == "USD"
    assert set(data["period"]) == {"from", "to"}
    assert data["total"]["spentUsd"] == pytest.approx(TOTAL)
    assert data["total"]["jobs"] == 4
    assert sum(r["spentUsd"] for r in data["rows"]) == pytest.approx(data["total"]["spentUsd"])

    rows = list(csv.DictReader(io.StringIO(_out(capsys, *args, "-o", "csv"))))
    assert rows[-1]["key"] == "TOTAL"
    assert float(rows[-1]["spentUsd"]) == pytest.approx(TOTAL)
    assert {r["currency"] for r in rows} == {"USD"}
    # One period on every row; the same as the JSON's, give or take the second between the two runs.
    periods = {(r["periodFrom"], r["periodTo"]) for r in rows}
    assert len(periods) == 1, periods
    ((start, end),) = periods
    for csv_at, json_at in ((start, data["period"]["from"]), (end, data["period"]["to"])):
        apart = dt.datetime.fromisoformat(csv_at) - dt.datetime.fromisoformat(json_at)
        assert dt.timedelta(0) <= apart <= dt.timedelta(seconds=5), (csv_at, json_at)


def test_html_states_the_period_currency_total_and_prices(
    world: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.html"
    _out(capsys, "--from-file", str(world), "--since", "2d", "-o", "html", "--out", str(out))
    page = out.read_text()
    assert re.search(r"to \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(UTC\), in USD", page)
    total = re.search(r'<tr class="total">(.*?)</tr>', page)
    assert total is not None and f"${TOTAL:,.2f}" in total.group(1)
    prices = re.search(r'<table class="prices">(.*?)</table>', page, re.S)
    assert prices is not None
    for pool in ("cat-spot", "own-od", "live-spot", "gone-pool"):
        assert pool in prices.group(1)
    assert "forecast for the whole job" in page


def test_every_price_has_its_source_and_date_in_json_and_in_the_table(
    world: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shipped = catalog.default().get("h100-80gb")
    assert shipped is not None
    data = json.loads(_out(capsys, "--from-file", str(world), "--since", "2d", "-o", "json"))
    prices = {p["pool"]: p for p in data["prices"]}
    assert set(prices) == {"cat-spot", "own-od", "live-spot", "gone-pool"}
    spot = prices["cat-spot"]
    assert (spot["kind"], spot["asOf"], spot["usdPerDeviceHourLow"]) == ("catalog", shipped.price.spot_as_of, 2.5)
    assert shipped.price.spot_source in spot["source"]
    assert spot["onDemandAsOf"] == shipped.price.as_of and shipped.price.source in spot["onDemandSource"]
    own = prices["own-od"]
    assert own["kind"] == "pool spec" and "spec.price.onDemandPerDeviceHour" in own["source"]
    assert "not dated" in own["asOf"]
    live = prices["live-spot"]
    assert live["kind"] == "live" and "DescribeSpotPriceHistory" in live["source"] and "p5.48xlarge" in live["source"]
    assert LIVE_SINCE in live["asOf"] and "recorded" in live["asOf"]
    gone = prices["gone-pool"]
    assert gone["kind"] == "unknown" and gone["usdPerDeviceHourHigh"] == 6.0
    table = _out(capsys, "--from-file", str(world), "--since", "2d")
    listed = table.split("Prices", 1)[1]
    for pool in prices:
        assert pool in listed
    assert shipped.price.spot_as_of in listed


def test_the_forecast_is_the_whole_jobs_beside_its_spending_to_date(
    world: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A 2-hour window: one hour of each 10-hour job is inside it.
    data = json.loads(_out(capsys, "--from-file", str(world), "--by", "job", "--since", "2h", "-o", "json"))
    llama = next(r for r in data["rows"] if r["key"] == "research/llama")
    assert llama["spentUsd"] == pytest.approx(4 * 1 * 2.5, rel=2e-3)
    assert llama["spentToDateWholeJobUsd"] == pytest.approx(4 * 10 * 2.5)
    assert llama["forecastWholeJobUsd"] == pytest.approx(1000.0)
    assert "forecastUsd" not in llama  # an unlabelled forecast beside the window's spending is gone
    assert "whole job" in data["wholeJobNote"]
    table = _out(capsys, "--from-file", str(world), "--since", "2h").splitlines()
    assert table[1].split()[-4:] == ["SPENT", "TO", "DATE*", "FORECAST*"]
    assert any(line.startswith("* ") and "whole job" in line for line in table)


# FOCUS 1.1 (https://focus.finops.org/focus-specification/v1-1/): the columns whose feature level is
# Mandatory, and the allowed values checked below.
FOCUS_VERSION = "1.1"
FOCUS_MANDATORY = (
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingCurrency",
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargePeriodEnd",
    "ChargePeriodStart",
    "ContractedCost",
    "EffectiveCost",
    "InvoiceIssuerName",
    "ListCost",
    "PricingQuantity",
    "PricingUnit",
    "ProviderName",
    "PublisherName",
    "ServiceCategory",
    "ServiceName",
)
# Conditional or Recommended columns this export fills (the issue asks for them).
FOCUS_FILLED = (
    "AvailabilityZone",
    "ConsumedQuantity",
    "ConsumedUnit",
    "PricingCategory",
    "RegionId",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "SubAccountId",
    "SubAccountName",
    "Tags",
)
CHARGE_CATEGORIES = {"Usage", "Purchase", "Tax", "Credit", "Adjustment"}
PRICING_CATEGORIES = {"Standard", "Dynamic", "Committed", "Other"}
SERVICE_CATEGORIES = {"AI and Machine Learning", "Compute", "Other"}  # the ones that could fit
UTC_DATETIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
DECIMAL = re.compile(r"^-?\d+(\.\d+)?$")


def test_focus_export_has_the_specifications_columns_and_value_formats(
    world: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from accel_operator.accounting import focus

    assert focus.VERSION == FOCUS_VERSION
    out = _out(capsys, "--from-file", str(world), "--since", "2d", "-o", "focus")
    reader = csv.DictReader(io.StringIO(out))
    header = reader.fieldnames or []
    missing = [c for c in (*FOCUS_MANDATORY, *FOCUS_FILLED) if c not in header]
    assert not missing, missing
    # Any other column is one of the specification's or a custom one, which FOCUS wants x_-prefixed.
    spec_others = {"ChargeFrequency", "ContractedUnitPrice", "ListUnitPrice", "RegionName", "SkuId"}
    unknown = [c for c in header if c not in {*FOCUS_MANDATORY, *FOCUS_FILLED, *spec_others} and not c.startswith("x_")]
    assert not unknown, unknown
    rows = list(reader)
    assert len(rows) == 4
    for r in rows:
        for c in ("BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd"):
            assert UTC_DATETIME.match(r[c]), (c, r[c])
        assert r["ChargePeriodStart"] < r["ChargePeriodEnd"]
        assert r["BillingPeriodStart"] <= r["ChargePeriodStart"] and r["ChargePeriodEnd"] <= r["BillingPeriodEnd"]
        for c in ("BilledCost", "EffectiveCost", "ListCost", "ContractedCost", "PricingQuantity", "ConsumedQuantity"):
            assert DECIMAL.match(r[c]), (c, r[c])
        assert r["ChargeCategory"] in CHARGE_CATEGORIES
        assert r["ChargeClass"] in {"", "Correction"}
        assert r["PricingCategory"] in PRICING_CATEGORIES
        assert r["ServiceCategory"] in SERVICE_CATEGORIES
        assert r["BillingCurrency"] == "USD"
        for c in FOCUS_MANDATORY:
            if c != "ChargeClass":  # null unless the row corrects an earlier one
                assert r[c] != "", c
        tags = json.loads(r["Tags"])
        assert {"team", "namespace", "job"} <= set(tags) and tags["team"] == r["SubAccountId"]
    by_job = {json.loads(r["Tags"])["job"]: r for r in rows}
    assert by_job["llama"]["PricingCategory"] == "Dynamic"  # spot: a price the provider moves
    assert by_job["eval"]["PricingCategory"] == "Standard"
    assert by_job["eval"]["ProviderName"] == "Amazon Web Services"
    assert float(by_job["llama"]["PricingQuantity"]) == pytest.approx(40.0)
    assert float(by_job["llama"]["ListCost"]) == pytest.approx(400.0)  # the on-demand equivalent
    billed = sum(float(r["BilledCost"]) for r in rows)
    report = json.loads(_out(capsys, "--from-file", str(world), "--since", "2d", "-o", "json"))
    assert billed == pytest.approx(report["total"]["spentUsd"], abs=1e-4)
    assert billed == pytest.approx(TOTAL, abs=1e-4)


def test_progress_goes_to_stderr_as_plain_lines_and_stdout_stays_json(
    world: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from accel_operator.cli import progress

    monkeypatch.setattr(progress, "DELAY_SECONDS", 0.0)  # as if the report took long
    assert main(["cost", "report", "--from-file", str(world), "-o", "json"]) == 0
    out, err = capsys.readouterr()
    json.loads(out)  # nothing but the document on stdout
    lines = err.splitlines()
    assert lines and all(line.startswith("cost report: ") for line in lines), err
    assert "\r" not in err and "\033" not in err  # not a terminal: no bar, no escape codes
    assert any("ledgers" in line for line in lines)


def test_progress_is_a_bar_redrawn_in_place_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from accel_operator.cli import progress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(progress, "DELAY_SECONDS", 0.0)
    stream = Tty()
    with progress.Progress("cost report", stream) as p:
        p.step("reading", total=4)
        for _ in range(4):
            p.advance()
    text = stream.getvalue()
    assert "\r" in text and "[" + "#" * progress.BAR_WIDTH + "]" in text and text.endswith("\n")


def test_nothing_is_shown_for_quick_work(world: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", "report", "--from-file", str(world), "-o", "json"]) == 0
    assert capsys.readouterr().err == ""
