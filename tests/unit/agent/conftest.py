"""Fixtures shared by the agent's unit tests: a fake NVML node and a clock moved by hand."""

from datetime import UTC, datetime

import pytest

from accel_agent.backends.fake import FakeNvml
from accel_agent.loop import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2026, 11, 13, 12, 0, 0, tzinfo=UTC))


@pytest.fixture
def nvml() -> FakeNvml:
    return FakeNvml.h100(2)
