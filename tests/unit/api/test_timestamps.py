"""The one RFC 3339 reader and writer (accel_api.durations): status timestamps to the second, the
cost ledger's with microseconds, a timestamp without an offset read as UTC."""

from __future__ import annotations

import datetime as dt

import pytest

from accel_api.durations import parse_time, parse_time_strict, stamp, stamp_exact

T = dt.datetime(2026, 11, 26, 12, 0, 5, tzinfo=dt.UTC)


def test_stamps_are_utc_to_the_second_or_exact() -> None:
    east = T.astimezone(dt.timezone(dt.timedelta(hours=2)))
    assert stamp(east) == "2026-11-26T12:00:05Z"
    assert stamp(T.replace(microsecond=250)) == "2026-11-26T12:00:05Z"
    assert stamp_exact(T) == "2026-11-26T12:00:05Z"
    assert stamp_exact(T.replace(microsecond=250)) == "2026-11-26T12:00:05.000250Z"


@pytest.mark.parametrize(
    "text", ["2026-11-26T12:00:05Z", "2026-11-26T14:00:05+02:00", "2026-11-26T12:00:05", "2026-11-26T12:00:05.000Z"]
)
def test_readable_timestamps_are_aware_and_equal(text: str) -> None:
    assert parse_time(text) == T and parse_time_strict(text) == T
    parsed = parse_time(text)
    assert parsed is not None and parsed.tzinfo is not None


@pytest.mark.parametrize("text", ["", None, "yesterday", "2026-13-01T00:00:00Z"])
def test_unreadable_is_none_or_an_error_when_strict(text: str | None) -> None:
    assert parse_time(text) is None
    if text is not None:
        with pytest.raises(ValueError):
            parse_time_strict(text)


def test_a_stamp_reads_back() -> None:
    exact = T.replace(microsecond=123456)
    assert parse_time_strict(stamp_exact(exact)) == exact
    assert parse_time(stamp(exact)) == T
