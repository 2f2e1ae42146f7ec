"""What a decision asks the world to do, as typed values the engine applies in order, and the
deterministic names of what it creates."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Final

from accel_operator.reconcile.common.snapshot import Admission


@dataclass(frozen=True, slots=True)
class CreateWorkload:
    """Create (idempotently) the batch Job of one attempt (and a gang's headless Service)."""

    attempt: int
    name: str
    pool: str
    devices: int
    nodes: int
    resume_from: str | None = None
    # The admission the Job carries in its annotation (None: none, a Job made by an older decision).
    admission: Admission | None = None


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
    """Ask a running attempt to checkpoint now: the checkpoint-now annotation on its pods (a job's
    decision: device health, consolidation, idle stop; or an early warning of its node's end)."""

    pods: tuple[tuple[str, str], ...]  # (namespace, name)
    token: str  # the annotation's value (the request's time): a job acts once per new value
    reason: str


@dataclass(frozen=True, slots=True)
class TaintNode:
    """Keep new work off a node (NoSchedule): a device there is failing, or a cloud will take it.

    ``keep_existing``: a taint of ``key`` already on the node stays as it is (an early warning:
    the first notice's taint is the record); otherwise this value replaces it (device health: the
    value names the failing devices, which change)."""

    node: str
    key: str
    value: str
    reason: str
    keep_existing: bool = field(default=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class UntaintNode:
    node: str
    key: str
    reason: str


Action = CreateWorkload | DeleteWorkload | ResolveCheckpoint | RecordEvent | RequestCheckpoint
NodeAction = TaintNode | UntaintNode
NodeWrite = NodeAction | RequestCheckpoint  # what engine.node_writes applies through the NodeWriter port


# --- names -------------------------------------------------------------------------------------
#
# Deterministic names of what the operator creates, so a retried reconcile never makes a second one.
#
# The decision records the workload's name in the job's status before the workload exists, and
# the workload builder names the objects it builds with the same function.

# An Indexed Job's pods get hostnames <name>-<index>, which must be DNS labels (≤ 63): leave
# room for the largest gang the API allows (bounds.NODES: index 65535).
INDEX_SUFFIX: Final = len("-65535")
MAX_NAME_LENGTH: Final = 63 - INDEX_SUFFIX
HASH: Final = 8
DNS_1035: Final = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:HASH]


def workload_name(job_name: str, attempt: int) -> str:
    """The Job's and the Service's name for one attempt: ``<job>-a<attempt>`` when that is a
    DNS-1035 label of at most ``MAX_NAME_LENGTH`` characters, else a stable shortening
    ``<prefix>-<hash of the job name>-a<attempt>`` (dots become dashes; a leading digit gets a
    ``j``), so pods' hostnames ``<name>-<index>`` are labels too."""
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0 (got {attempt})")
    tail = f"-a{attempt}"
    plain = f"{job_name}{tail}"
    if len(plain) <= MAX_NAME_LENGTH and DNS_1035.match(plain):
        return plain
    stem = re.sub(r"[^a-z0-9-]", "-", job_name.lower())
    if not stem[:1].isalpha():
        stem = "j" + stem
    room = MAX_NAME_LENGTH - len(tail) - HASH - 1
    stem = stem[: room - 1].rstrip("-")  # -1: the dash before the hash
    return f"{stem}-{digest(job_name)}{tail}"
