"""Which checkpoint a new attempt resumes from: pure choices over what a store or the job reported.

The layout (README, "The checkpoint contract"): checkpoint N lives under ``<uri>/step-<N>/``
(N in decimal, zero-padding allowed, compared as a number); its data is written first and the
empty marker ``<uri>/step-<N>/COMPLETE`` last. Only a step whose marker exists is complete: a
writer killed mid-write leaves data without a marker, and that step is never chosen. Among
complete steps the highest wins; equal steps (``step-5`` and ``step-05``) go to the newer marker.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from accel_api import vocabulary as v


@dataclass(frozen=True)
class Checkpoint:
    uri: str  # the step's directory or prefix, no trailing slash: what ACCEL_RESUME_FROM carries
    step: int
    time: dt.datetime  # when it became complete (its marker's modification time)


def step_of(name: str) -> int | None:
    """``step-120`` (optionally with a trailing ``/``) -> 120; anything else -> None."""
    name = name.rstrip("/")
    digits = name.removeprefix(v.CHECKPOINT_STEP_PREFIX)
    if digits == name or not digits.isascii() or not digits.isdigit() or len(digits) > 18:
        return None
    return int(digits)


def newest(candidates: Iterable[Checkpoint]) -> Checkpoint | None:
    """The complete checkpoint to resume from: the highest step; equal steps by the newer time."""
    return max(candidates, key=lambda c: (c.step, c.time), default=None)


def by_step_descending(names: Iterable[str]) -> list[list[str]]:
    """Step directory names grouped by step number, highest first (non-steps dropped): the order
    in which a store checks markers, stopping at the first group with a complete member."""
    groups: dict[int, list[str]] = {}
    for name in names:
        step = step_of(name)
        if step is not None:
            groups.setdefault(step, []).append(name)
    return [sorted(groups[s]) for s in sorted(groups, reverse=True)]


def reported(annotations: Mapping[str, str], now: dt.datetime) -> Checkpoint | None:
    """What the job reported through ``accel.dev/last-checkpoint`` (and ``-step``): the way to know
    the latest checkpoint on a PVC, which the operator does not mount. ``now`` stands for the time
    when the report carries none."""
    uri = annotations.get(v.ANNOTATION_CHECKPOINT, "").strip()
    if not uri:
        return None
    step_text = annotations.get(v.ANNOTATION_CHECKPOINT_STEP, "").strip()
    step = int(step_text) if step_text.isascii() and step_text.isdigit() and len(step_text) <= 18 else None
    if step is None:
        step = step_of(uri.rstrip("/").rsplit("/", 1)[-1])
    return Checkpoint(uri=uri.rstrip("/"), step=step if step is not None else 0, time=now)
