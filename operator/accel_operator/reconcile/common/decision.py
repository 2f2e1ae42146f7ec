"""What every decision returns, shared by the job, node and accounting rooms: the condition
vocabulary, ``Cond``, ``Decision`` and the one clip for the messages the reconcilers build by hand.

Kept below the rooms so that none imports another to name a condition (the old ``decide`` ↔
``policy_gate``/``idle_stop``/``status`` cycle, masked by function-level imports, is gone).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from accel_api.enums import JobPhase
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common.snapshot import Blocked, Gang

# Condition types, in the order they are written.
VALID, PLANNED, ADMITTED, RUNNING, FINISHED = "Valid", "Planned", "Admitted", "Running", "Finished"
# Written once and carried by every later decision: how the attempt started, and the fallback.
RESUMED, SPOT_FALLBACK = "Resumed", "SpotFallback"
STICKY = (RESUMED, SPOT_FALLBACK)
# The workload's podFailurePolicy: rule 0 is a disruption (a preemption), rule 1 a failed container.
DISRUPTION_RULE = "rule at index 0"


@dataclass(frozen=True, slots=True)
class Cond:
    type: str
    ok: bool
    reason: str
    message: str = ""


@dataclass(frozen=True, slots=True)
class Decision:
    """What ``job`` should become. ``status`` holds only the fields to write (camelCase, JSON
    values; None clears a field); ``conditions`` replace the job's conditions (transition times
    are kept by the writer while a condition's status holds)."""

    phase: JobPhase
    conditions: tuple[Cond, ...]
    status: dict[str, Any] = field(default_factory=dict)
    actions: tuple[act.Action, ...] = ()
    reason: str = ""
    # Set when the job waits for its first-choice pool: later jobs may only backfill around it.
    blocks: tuple[str, Blocked] | None = None
    admitted: tuple[str, Gang] | None = None

    @property
    def message(self) -> str:
        return self.reason


MESSAGE_LIMIT: Final = 1000


def clip(text: str) -> str:
    """``text`` cut to ``MESSAGE_LIMIT`` characters, with a trailing "…" when cut."""
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"
