"""Text from outside the agent, made safe to put in a log line: bounded and on one line.

Pod names, annotations, labels, API error bodies and HTTP request lines come from tenants or
from clients of the metrics port. Logged in full they can flood the log (a 256 KiB annotation
per pass) or forge log lines (an embedded newline). :func:`shorten` keeps the head of the value,
says how much was cut, and escapes control characters. Everything the agent logs that it did not
write itself goes through it.
"""

from __future__ import annotations

from typing import Final

DEFAULT_LIMIT: Final = 120


def shorten(value: object, limit: int = DEFAULT_LIMIT) -> str:
    """``str(value)`` cut to ``limit`` characters (plus a marker of what was cut), control
    characters escaped (``\\n`` → ``\\\\n``) so the value cannot start a new log line."""
    text = str(value)
    cut = len(text) - limit
    head = text[:limit] if cut > 0 else text
    escaped = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in head)
    return f"{escaped}…(+{cut} chars)" if cut > 0 else escaped
