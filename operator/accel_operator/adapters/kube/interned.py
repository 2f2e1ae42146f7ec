"""Parsed values shared between the objects that carry the same wire value.

Thousands of AcceleratorJobs made from one template carry the same spec, and the jobs of one
spec the same ``status.plan`` and mostly the same condition texts. Parsed one by one, each job's
view holds its own frozen models (about 16 KB a job, more than its JSON), and every watch event
validates them again. Here each distinct wire value (keyed by its canonical JSON) is validated
once and its frozen model shared. The models are immutable, so sharing changes nothing a reader
can see; when ``parse`` raises, nothing is kept (the caller sees the same error each time).

The table is bounded: when it holds ``limit`` values it starts again empty (the cost is one
validation per value, as without it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

LIMIT = 8192


class Interner:
    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self._values: dict[tuple[str, str], Any] = {}
        self.hits = 0
        self.misses = 0

    def get(self, kind: str, raw: Any, parse: Callable[[Any], T]) -> T:
        """``parse(raw)``, or the value it gave for an equal ``raw`` of the same ``kind``."""
        try:
            key = (kind, json.dumps(raw, sort_keys=True, separators=(",", ":"), allow_nan=False))
        except (TypeError, ValueError):
            return parse(raw)  # not plain JSON: parsed alone (and refused there)
        hit = self._values.get(key)
        if hit is not None:
            self.hits += 1
            value: T = hit
            return value
        self.misses += 1
        value = parse(raw)
        if len(self._values) >= self.limit:
            self._values.clear()
        self._values[key] = value
        return value

    def __len__(self) -> int:
        return len(self._values)
