"""Durations as people write them in YAML (``90m``, ``36h``, ``2d``, ``1h30m``, ``45s``), and the
status timestamps (RFC 3339 in UTC, to the second): the one parser of each."""

import datetime as dt
import re
from typing import Final

from accel_api.patterns import DURATION as DURATION_PATTERN

_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(d|h|m|s)")
_SECONDS: Final = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}


def parse_seconds(text: str) -> float:
    """Seconds in a duration such as ``1h30m``; ValueError names the accepted shape."""
    if not re.fullmatch(DURATION_PATTERN, text):
        raise ValueError(f"{text!r} is not a duration; write e.g. 90m, 36h, 2d or 1h30m")
    return sum(float(n) * _SECONDS[unit] for n, unit in _PART.findall(text))


def stamp(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> dt.datetime | None:
    """A status timestamp (RFC 3339), or None when absent or unreadable."""
    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def parse_utc(text: object) -> dt.datetime | None:
    """A time from outside input (a cloud's event, an agent's report), or None when absent or
    unreadable; one written without an offset is taken as UTC."""
    t = parse_time(text) if isinstance(text, str) else None
    return t if t is None or t.tzinfo is not None else t.replace(tzinfo=dt.UTC)
