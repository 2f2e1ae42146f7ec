"""Durations as people write them in YAML (``90m``, ``36h``, ``2d``, ``1h30m``, ``45s``), and the
status timestamps (RFC 3339 in UTC, to the second): the one parser of each."""

import datetime as dt
import re
from typing import Final

from accel_api.bounds import TIMEDELTA_SECONDS_MAX
from accel_api.patterns import DURATION as DURATION_PATTERN

_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(d|h|m|s)")
_SECONDS: Final = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}


def parse_seconds(text: str) -> float:
    """Seconds in a duration such as ``1h30m``; ValueError names the accepted shape."""
    if not re.fullmatch(DURATION_PATTERN, text):
        raise ValueError(f"{text!r} is not a duration; write e.g. 90m, 36h, 2d or 1h30m")
    return sum(float(n) * _SECONDS[unit] for n, unit in _PART.findall(text))


def stamp(t: dt.datetime) -> str:
    """``t`` as a status timestamp: RFC 3339 in UTC, to the second (``2026-11-26T12:00:00Z``)."""
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def stamp_exact(t: dt.datetime) -> str:
    """``t`` as :func:`stamp` writes it, with its microseconds when it has any (the cost ledger:
    its intervals must telescope)."""
    t = t.astimezone(dt.UTC)
    if t.microsecond:
        return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return stamp(t)


def parse_time_strict(text: str) -> dt.datetime:
    """An RFC 3339 timestamp; one without an offset is read as UTC. ValueError when unreadable."""
    t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)


def parse_time(text: str | None) -> dt.datetime | None:
    """A status timestamp (RFC 3339; without an offset read as UTC), or None when absent or
    unreadable."""
    if not text:
        return None
    try:
        return parse_time_strict(text)
    except ValueError:
        return None


def later(t: dt.datetime, seconds: float) -> dt.datetime:
    """``t`` plus an estimate of ``seconds``, clamped to ``[0, bounds.TIMEDELTA_SECONDS_MAX]``
    (NaN counts as the maximum): an absurd estimate never raises ``OverflowError``."""
    s = float(seconds)
    if not s <= TIMEDELTA_SECONDS_MAX:  # also NaN and +inf
        s = TIMEDELTA_SECONDS_MAX
    return t + dt.timedelta(seconds=max(0.0, s))
