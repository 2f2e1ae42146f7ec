"""TPU node states through the real google-cloud-tpu client (REST transport) against a local
stand-in of the TPU v2 API."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from accel_operator.adapters.gcp.tpu import FakeTpuNodes, GoogleTpuNodes, TpuUnavailable
from tests.support.tpu_standin import TpuStandin, tpu_standin


@pytest.fixture
def standin() -> Iterator[TpuStandin]:
    with tpu_standin() as s:
        yield s


def test_states_through_the_client(standin: TpuStandin) -> None:
    standin.nodes[("proj", "us-central2-b")] = {
        "tpu-a": "READY",
        "tpu-b": "PREEMPTED",
        "tpu-c": "CREATING",
        "tpu-d": "TERMINATED",
        "tpu-e": "READY",
    }
    nodes = GoogleTpuNodes.at(standin.endpoint)
    assert nodes.states("proj", "us-central2-b") == {
        "tpu-a": "READY",
        "tpu-b": "PREEMPTED",
        "tpu-c": "CREATING",
        "tpu-d": "TERMINATED",
        "tpu-e": "READY",
    }
    assert len(standin.requests) == 3  # pages of 2: the client pages through
    assert nodes.states("proj", "europe-west4-a") == {}


def test_api_errors_are_unavailable(standin: TpuStandin) -> None:
    standin.fail_with = 503
    with pytest.raises(TpuUnavailable):
        GoogleTpuNodes.at(standin.endpoint).states("proj", "zone")


def test_fake() -> None:
    fake = FakeTpuNodes(nodes={("p", "z"): {"n": "PREEMPTED"}})
    assert fake.states("p", "z") == {"n": "PREEMPTED"}
    fake.fail_next = TpuUnavailable("down")
    with pytest.raises(TpuUnavailable):
        fake.states("p", "z")
    assert fake.calls == [("p", "z"), ("p", "z")]
