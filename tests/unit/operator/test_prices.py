"""Prices: EC2 spot prices through boto3 against moto's server mode, TPU accelerator types through
the real google-cloud-tpu client against the local stand-in, the TTL cache, and the price book's
fallback to the static price when a live source fails."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from accel_api import catalog as catalog_mod
from accel_api.pool import AcceleratorPoolSpec
from accel_operator.adapters.aws.errors import CloudUnavailable
from accel_operator.adapters.aws.prices import CachedSpotPrices, Ec2SpotPrices, FakeSpotPrices
from accel_operator.adapters.gcp.tpu import FakeTpuNodes, GoogleTpuNodes, TpuUnavailable
from accel_operator.adapters.pricebook import PriceBook
from tests.support.moto_server import MotoServer, moto_server
from tests.support.tpu_standin import TpuStandin, tpu_standin

CATALOG = catalog_mod.default()


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    with moto_server() as server:
        yield server


@pytest.fixture
def standin() -> Iterator[TpuStandin]:
    with tpu_standin() as s:
        yield s


def test_spot_price_by_instance_type_and_zone_through_boto3(moto: MotoServer) -> None:
    prices = Ec2SpotPrices(moto.client("ec2"))
    # moto answers a fixed price for every type it offers in the zone: what matters here is the
    # request (type, zone, products) and the reading of EC2's answer.
    assert prices.spot_price("p4d.24xlarge", "us-east-1a") == pytest.approx(0.00001)
    with pytest.raises(CloudUnavailable, match="no spot price"):
        prices.spot_price("p4d.24xlarge", "eu-west-9z")


def test_unreachable_ec2_is_unavailable() -> None:
    import boto3

    client = boto3.client(
        "ec2",
        region_name="us-east-1",
        endpoint_url="http://127.0.0.1:9",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=__import__("botocore.config").config.Config(retries={"max_attempts": 1}, connect_timeout=1),
    )
    with pytest.raises(CloudUnavailable):
        Ec2SpotPrices(client).spot_price("p5.48xlarge", "us-east-1a")


def test_the_cache_keeps_an_answer_for_its_ttl_and_not_a_failure() -> None:
    fake = FakeSpotPrices(prices={("p5.48xlarge", "us-east-1a"): 30.0})
    now = [0.0]
    cached = CachedSpotPrices(fake, ttl_seconds=300, clock=lambda: now[0])
    assert cached.spot_price("p5.48xlarge", "us-east-1a") == 30.0
    fake.prices[("p5.48xlarge", "us-east-1a")] = 20.0
    now[0] = 299
    assert cached.spot_price("p5.48xlarge", "us-east-1a") == 30.0
    now[0] = 300
    assert cached.spot_price("p5.48xlarge", "us-east-1a") == 20.0
    assert len(fake.calls) == 2
    fake.fail_next = CloudUnavailable("throttled")
    now[0] = 700
    with pytest.raises(CloudUnavailable):
        cached.spot_price("p5.48xlarge", "us-east-1a")
    assert cached.spot_price("p5.48xlarge", "us-east-1a") == 20.0  # the failure was not cached
    assert len(fake.calls) == 4


def test_tpu_accelerator_types_through_the_client(standin: TpuStandin) -> None:
    standin.accelerator_types[("proj", "us-west4-a")] = ["v5litepod-1", "v5litepod-4", "v5litepod-8", "v5p-8"]
    tpu = GoogleTpuNodes.at(standin.endpoint)
    assert tpu.accelerator_types("proj", "us-west4-a") == {"v5litepod-1", "v5litepod-4", "v5litepod-8", "v5p-8"}
    assert sum(1 for r in standin.requests if r.endswith("acceleratorTypes")) == 2  # paged
    standin.fail_with = 503
    with pytest.raises(TpuUnavailable):
        tpu.accelerator_types("proj", "us-west4-a")


def _pool(**kw: object) -> AcceleratorPoolSpec:
    return AcceleratorPoolSpec.model_validate(kw)


AWS_SPOT = {
    "provider": "aws",
    "accelerator": "h100-80gb",
    "devicesPerNode": 8,
    "capacityType": "spot",
    "instanceType": "p5.48xlarge",
    "zone": "us-east-1a",
    "price": {"source": "live"},
}


def test_live_aws_spot_price_per_device_and_fallback_to_the_catalog() -> None:
    h100 = CATALOG.get("h100-80gb")
    assert h100 is not None
    fake = FakeSpotPrices(prices={("p5.48xlarge", "us-east-1a"): 24.0})
    book = PriceBook(spot=fake)
    q = book.quote(_pool(**AWS_SPOT), h100)
    assert (q.usd_per_device_hour, q.source, q.fallback) == (3.0, "live", None)
    assert q.on_demand_usd_per_device_hour == h100.price.on_demand_per_device_hour
    fake.fail_next = CloudUnavailable("throttled")
    q = book.quote(_pool(**AWS_SPOT), h100)
    assert q.usd_per_device_hour == h100.price.spot_per_device_hour
    assert q.source == "catalog"
    assert q.fallback is not None and "throttled" in q.fallback
    static = book.quote(_pool(**{**AWS_SPOT, "price": {"spotPerDeviceHour": 2.5}}), h100)
    assert (static.usd_per_device_hour, static.source, static.fallback) == (2.5, "pool", None)


def test_live_tpu_pool_priced_from_the_catalog_when_the_zone_offers_the_type() -> None:
    v5e = CATALOG.get("tpu-v5e")
    assert v5e is not None
    fake = FakeTpuNodes(types={("proj", "us-west4-a"): frozenset({"v5litepod-8"})})
    book = PriceBook(tpu=fake, gcp_project="proj")
    spec = {"provider": "gcp", "accelerator": "tpu-v5e", "devicesPerNode": 8, "zone": "us-west4-a"}
    live = book.quote(_pool(**spec, price={"source": "live"}), v5e)
    assert (live.source, live.fallback) == ("live", None)
    assert live.usd_per_device_hour == v5e.price.on_demand_per_device_hour
    elsewhere = book.quote(_pool(**{**spec, "zone": "europe-west4-b"}, price={"source": "live"}), v5e)
    assert elsewhere.fallback is not None and "offers no v5litepod" in elsewhere.fallback
    fake.fail_next = TpuUnavailable("503")
    assert book.quote(_pool(**spec, price={"source": "live"}), v5e).fallback is not None
