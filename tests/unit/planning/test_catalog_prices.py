"""Catalog list prices: every figure names its date and source, spot figures are dated apart."""

import datetime as dt
import re
from pathlib import Path

import pytest

from accel_api import catalog
from tests.support.builders import mi300x_catalog_entry

_DATE = re.compile(r"^(\d{4})-(\d{2})(?:-(\d{2}))?$")
# The date before which a figure counts as not refreshed (the catalog's figures of issue 13).
_OLD = "2025-06"
# A refreshed figure names where it was read: a page address, or a repository file and commit.
_WHERE = re.compile(r"https://\S+|\b[\w.-]+/[\w.-]+, \S+\.\w+ .*commit [0-9a-f]{7,40} of \d{4}-\d{2}-\d{2}")


def _date(text: str) -> dt.date:
    m = _DATE.match(text)
    assert m is not None, text
    year, month, day = m.groups()
    return dt.date(int(year), int(month), int(day or 1))


def _price(cat: catalog.Catalog, acc_id: str) -> catalog.ListPrice:
    acc = cat.get(acc_id)
    assert acc is not None, acc_id
    return acc.price


def _load(tmp_path: Path, price: str) -> catalog.Catalog:
    f = tmp_path / "cat.yaml"
    f.write_text("accelerators:\n" + mi300x_catalog_entry(price))
    return catalog.load(f)


@pytest.mark.parametrize("acc_id", catalog.default().ids())
def test_every_shipped_price_names_its_date_and_source(acc_id: str) -> None:
    price = _price(catalog.default(), acc_id)
    today = dt.datetime.now(dt.UTC).date()
    for as_of, source in ((price.as_of, price.source), (price.spot_as_of, price.spot_source)):
        assert _date(as_of) <= today, (acc_id, as_of)
        assert len(source.strip()) >= 20, (acc_id, source)
        if as_of > _OLD:
            assert _WHERE.search(source), f"{acc_id}: a refreshed price must name its page or file+commit: {source}"
        else:
            assert "not refreshed" in source or "typical" in source, f"{acc_id}: an old price must say so: {source}"


def test_refreshed_on_demand_figures_are_the_instance_price_per_device() -> None:
    """The source names the instance whose price was divided by the node's devices."""
    for acc in catalog.default():
        if acc.price.as_of <= _OLD:
            continue
        if acc.price.source.startswith("GPU marketplace"):
            # Consumer and workstation cards no cloud sells by the instance: the figure is per GPU,
            # and its source must say so and name its page (the test above).
            assert "https://" in acc.price.source, acc.id
            continue
        m = re.search(r"\(([a-z0-9-]+\.\d*x?large)\)", acc.price.source)
        assert m is not None, acc.id
        assert acc.devices_per_node in (4, 8), acc.id


def test_spot_date_and_source_default_to_the_on_demand_ones(tmp_path: Path) -> None:
    cat = _load(tmp_path, "{onDemandPerDeviceHour: 6.0, spotPerDeviceHour: 2.0, asOf: '2026-01', source: page A}")
    price = _price(cat, "mi300x")
    assert (price.spot_as_of, price.spot_source) == ("2026-01", "page A")


def test_spot_date_and_source_may_differ(tmp_path: Path) -> None:
    cat = _load(
        tmp_path,
        "{onDemandPerDeviceHour: 6.0, spotPerDeviceHour: 2.0, asOf: '2026-01', source: page A,"
        " spotAsOf: '2025-06', spotSource: page B}",
    )
    price = _price(cat, "mi300x")
    dates = (price.as_of, price.source, price.spot_as_of, price.spot_source)
    assert dates == ("2026-01", "page A", "2025-06", "page B")


def test_an_override_of_the_spot_figure_carries_its_own_date(tmp_path: Path) -> None:
    f = tmp_path / "cat.yaml"
    f.write_text(
        "accelerators:\n  h100-80gb: {price: {spotPerDeviceHour: 1.25, spotAsOf: '2026-11-01', spotSource: q}}\n"
    )
    price = _price(catalog.load(f), "h100-80gb")
    shipped = _price(catalog.default(), "h100-80gb")
    assert (price.spot_per_device_hour, price.spot_as_of, price.spot_source) == (1.25, "2026-11-01", "q")
    assert (price.on_demand_per_device_hour, price.as_of, price.source) == (
        shipped.on_demand_per_device_hour,
        shipped.as_of,
        shipped.source,
    )


def test_an_override_without_date_never_inherits_the_shipped_one(tmp_path: Path) -> None:
    f = tmp_path / "cat.yaml"
    f.write_text(
        "accelerators:\n  h100-80gb: {price: {spotPerDeviceHour: 1.25}}\n  t4: {price: {onDemandPerDeviceHour: 0.5}}\n"
    )
    cat = catalog.load(f)
    h100, t4 = _price(cat, "h100-80gb"), _price(cat, "t4")
    assert "not given" in h100.spot_as_of and "not given" in h100.spot_source
    assert h100.as_of == _price(catalog.default(), "h100-80gb").as_of
    assert "not given" in t4.as_of and "not given" in t4.source
    assert t4.spot_as_of == _price(catalog.default(), "t4").spot_as_of


@pytest.mark.parametrize(
    ("price", "expected"),
    [
        ("{onDemandPerDeviceHour: 6.0, spotPerDeviceHour: 2.0, asOf: '2026-01'}", "missing price.source"),
        ("{onDemandPerDeviceHour: 6.0, spotPerDeviceHour: 2.0, source: page A}", "missing price.asOf"),
        (
            "{onDemandPerDeviceHour: 6.0, spotPerDeviceHour: 2.0, asOf: '2026-01', source: ' '}",
            "price.source: a price needs its date and source",
        ),
        (
            "{onDemandPerDeviceHour: 6.0, spotPerDeviceHour: 2.0, asOf: '2026-01', source: A, spotAsOf: ''}",
            "price.spotAsOf: must be a non-empty string",
        ),
    ],
)
def test_a_price_without_date_or_source_is_refused(tmp_path: Path, price: str, expected: str) -> None:
    with pytest.raises(catalog.CatalogError) as err:
        _load(tmp_path, price)
    assert expected in str(err.value)
