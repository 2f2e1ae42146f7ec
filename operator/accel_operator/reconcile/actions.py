"""What a decision asks the world to do, as typed values the handlers apply in order."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CreateWorkload:
    """Create (idempotently) the batch Job of one attempt (and a gang's headless Service)."""

    attempt: int
    name: str
    pool: str
    devices: int
    nodes: int
    resume_from: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteWorkload:
    """Delete an attempt's Job and Service (its pods go with them)."""

    name: str
    reason: str


@dataclass(frozen=True, slots=True)
class ResolveCheckpoint:
    """Find the latest complete checkpoint under ``uri`` for ``attempt`` (I/O: the scheduler does
    it in its executor, with a timeout, and hands the answer to the next decision)."""

    attempt: int
    uri: str


@dataclass(frozen=True, slots=True)
class RecordEvent:
    """A Kubernetes event on the AcceleratorJob: every decision a person may ask about."""

    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class RequestCheckpoint:
    """Ask a running attempt to checkpoint now: the checkpoint-now annotation on its pods."""

    pods: tuple[tuple[str, str], ...]  # (namespace, name)
    token: str  # the annotation's value (the request's time): a job acts once per new value
    reason: str


@dataclass(frozen=True, slots=True)
class TaintNode:
    """Keep new work off a node (NoSchedule): a device there is failing."""

    node: str
    key: str
    value: str
    reason: str


@dataclass(frozen=True, slots=True)
class UntaintNode:
    node: str
    key: str
    reason: str


Action = CreateWorkload | DeleteWorkload | ResolveCheckpoint | RecordEvent | RequestCheckpoint
NodeAction = TaintNode | UntaintNode
