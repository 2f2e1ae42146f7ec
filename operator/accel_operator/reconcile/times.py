"""Status timestamps: RFC 3339 in UTC, to the second (what the status fields hold)."""

from __future__ import annotations

import datetime as dt


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
