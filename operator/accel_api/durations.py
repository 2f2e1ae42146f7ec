"""Durations as people write them in YAML: ``90m``, ``36h``, ``2d``, ``1h30m``, ``45s``."""

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
