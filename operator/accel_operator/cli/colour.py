"""Colour in the CLI's output: only on a terminal, and never when ``NO_COLOR`` is set (to any
non-empty value, as no-color.org asks). Pipes, files and CI logs get plain text."""

from __future__ import annotations

import os
from typing import TextIO

_CODES = {"red": "31", "green": "32", "yellow": "33", "bold": "1"}


def enabled(stream: TextIO) -> bool:
    """Whether ``stream`` gets colour: a TTY, and no ``NO_COLOR``."""
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def paint(text: str, style: str, stream: TextIO) -> str:
    """``text`` in ``style`` (red, green, yellow, bold) when ``stream`` gets colour, else as it is."""
    if not enabled(stream) or style not in _CODES:
        return text
    return f"\033[{_CODES[style]}m{text}\033[0m"
