"""The adapters' one error base and the one retry: bounded, with a growing pause, on Unavailable only."""

from __future__ import annotations

import asyncio

import pytest

from accel_operator.adapters.aws.errors import CloudUnavailable
from accel_operator.adapters.errors import Unavailable, retrying
from accel_operator.adapters.gcp.tpu import TpuUnavailable
from accel_operator.adapters.kube.client import ClusterUnavailable


class Flaky:
    """Raises each of ``errors`` in turn, then answers ``"done"``."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "done"


def _run(flaky: Flaky, **kw: object) -> tuple[str, list[float], list[Unavailable]]:
    pauses: list[float] = []
    seen: list[Unavailable] = []

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)

    answer = asyncio.run(retrying(flaky, sleep=sleep, on_retry=seen.append, **kw))  # type: ignore[arg-type]
    return answer, pauses, seen


def test_every_adapter_error_is_unavailable() -> None:
    for cls in (ClusterUnavailable, CloudUnavailable, TpuUnavailable):
        assert issubclass(cls, Unavailable)


def test_unavailable_is_tried_again_with_a_doubling_pause_up_to_the_cap() -> None:
    errors = [ClusterUnavailable("a"), CloudUnavailable("b"), TpuUnavailable("c"), ClusterUnavailable("d")]
    flaky = Flaky(*errors)
    answer, pauses, seen = _run(flaky, attempts=5, delay=1.0, max_delay=3.0)
    assert answer == "done" and flaky.calls == 5
    assert pauses == [1.0, 2.0, 3.0, 3.0]
    assert seen == errors


def test_the_last_attempts_error_is_raised() -> None:
    flaky = Flaky(*(ClusterUnavailable(str(i)) for i in range(3)))
    with pytest.raises(ClusterUnavailable, match="2"):
        _run(flaky, attempts=3)
    assert flaky.calls == 3


def test_any_other_error_is_raised_at_once() -> None:
    flaky = Flaky(ValueError("refused"))
    with pytest.raises(ValueError, match="refused"):
        _run(flaky)
    assert flaky.calls == 1


def test_one_attempt_is_no_retry_and_none_is_refused() -> None:
    flaky = Flaky(ClusterUnavailable("x"))
    with pytest.raises(ClusterUnavailable):
        _run(flaky, attempts=1)
    assert flaky.calls == 1
    with pytest.raises(ValueError, match="attempts"):
        _run(Flaky(), attempts=0)
