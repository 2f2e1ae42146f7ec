"""What every decision returns, shared by the job, node and accounting rooms: the condition
vocabulary, ``Cond``, ``Decision``, the status fields a decision writes (``StatusPatch``, typed
to the edge and serialised once, by ``StatusPatch.to_wire``) and the one clip for the messages the
reconcilers build by hand.

Kept below the rooms so that none imports another to name a condition (the old ``decide`` ↔
``policy_gate``/``idle_stop``/``status`` cycle, masked by function-level imports, is gone).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any, Final

from pydantic import BaseModel
from pydantic.alias_generators import to_camel

from accel_api.enums import JobPhase
from accel_api.job import AttemptFailure, CheckpointStatus, HealthStatus, PlanStatus, ResumeStatus, SpotStatus
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


class Clear(enum.Enum):
    """A status field the patch removes (a JSON merge patch's null)."""

    CLEAR = "clear"


CLEAR: Final = Clear.CLEAR


@dataclass(frozen=True, slots=True)
class PlanWrite:
    """``status.plan`` as a decision writes it. The wire form is made once per plan and chosen
    candidate (``reconcile/job/status.py:plan_wire``) and shared by every job of that plan: building
    a plan's status costs several decisions, so the patch carries that one serialisation (callers
    must not change it) and the figure the scheduler reads, typed."""

    wire: Mapping[str, Any]
    duration_seconds: float | None  # the chosen candidate's expected run time, as in the wire form
    # Made with the wire form, once per plan (None: worked out when asked): the wire form without
    # its nulls (as the API server stores it: what a job's stored plan is compared with) and the
    # plan as the status model (what a job's parsed status holds), so that a job decided again on
    # the plan it already carries is found to hold it without serialising its status.
    stored: Mapping[str, Any] | None = None
    model: PlanStatus | None = None

    def value(self) -> PlanStatus:
        """The plan as the status model (parsed on demand: for readers off the scheduling path)."""
        return self.model if self.model is not None else PlanStatus.model_validate(self.wire)


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusPatch:
    """The status fields a decision writes; the rest of the status is left as it is. None leaves a
    field; ``CLEAR`` removes it (only ``plan`` and ``workload`` are ever removed). Nested values are
    the status models, written whole: a field of one that is None removes that field (the health
    markers are cleared so). :meth:`to_wire` is the one place a decision's status is serialised."""

    plan: PlanWrite | Clear | None = None
    attempt: int | None = None
    workload: str | Clear | None = None
    admitted_time: str | None = None
    retries: int | None = None
    preemptions: int | None = None
    last_failure: AttemptFailure | None = None
    earlier_failures: tuple[AttemptFailure, ...] | None = None
    spot: SpotStatus | None = None
    last_checkpoint: CheckpointStatus | None = None
    resume: ResumeStatus | None = None
    start_time: str | None = None
    attempt_start_time: str | None = None
    completion_time: str | None = None
    health: HealthStatus | None = None
    message: str | None = None

    @property
    def empty(self) -> bool:
        """Whether the patch writes nothing."""
        return all(getattr(self, name) is None for name in _NAMES)

    def merged(self, later: StatusPatch) -> StatusPatch:
        """This patch with the fields ``later`` sets (or clears) taken from ``later``."""
        return StatusPatch(
            **{n: getattr(later, n) if getattr(later, n) is not None else getattr(self, n) for n in _NAMES}
        )

    def to_wire(self) -> dict[str, Any]:
        """The JSON merge patch of the status (camelCase keys; null for a cleared field)."""
        out: dict[str, Any] = {}
        for name in _NAMES:
            value = getattr(self, name)
            if value is not None:
                out[_WIRE_NAMES[name]] = _wire(name, value)
        return out


# The failures are written without their empty fields, as they always were (a merge patch keeps a
# field of the previous lastFailure that the new one leaves out).
_SPARSE: Final = frozenset({"last_failure", "earlier_failures"})


def _wire(name: str, value: object) -> Any:
    if value is CLEAR:
        return None
    if isinstance(value, PlanWrite):
        return value.wire
    if isinstance(value, BaseModel):
        return value.model_dump(by_alias=True, mode="json", exclude_none=name in _SPARSE)
    if isinstance(value, tuple):
        return [_wire(name, v) for v in value]
    return value


_NAMES: Final = tuple(f.name for f in fields(StatusPatch))
_WIRE_NAMES: Final = MappingProxyType({name: to_camel(name) for name in _NAMES})  # read-only
NO_CHANGE: Final = StatusPatch()


# The first two conditions of every job that has a plan (admitted, running, held back, stopped).
SPEC_VALID_AND_PLANNED: Final = (Cond(VALID, True, "SpecValid"), Cond(PLANNED, True, "Planned"))


@dataclass(frozen=True, slots=True)
class Decision:
    """What ``job`` should become. ``status`` holds only the fields to write; ``conditions``
    replace the job's conditions (transition times are kept by the writer while a condition's
    status holds)."""

    phase: JobPhase
    conditions: tuple[Cond, ...]
    status: StatusPatch = NO_CHANGE
    actions: tuple[act.Action, ...] = ()
    reason: str = ""
    # Set when the job waits for its first-choice pool: later jobs may only backfill around it.
    blocks: tuple[str, Blocked] | None = None
    admitted: tuple[str, Gang] | None = None
    # An admission whose batch Job records it (CreateWorkload.admission): the applier creates the
    # Job first and may hold the status back until the pods have their nodes, so that Admitted and
    # Running are one write (engine/apply.py). False: the status is written first, as for any decision.
    status_after_workload: bool = False

    @property
    def message(self) -> str:
        return self.reason


MESSAGE_LIMIT: Final = 1000


def clip(text: str) -> str:
    """``text`` cut to ``MESSAGE_LIMIT`` characters, with a trailing "…" when cut."""
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"
