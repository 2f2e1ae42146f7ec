"""The sweep: workloads and pods of ours that no AcceleratorJob's current attempt accounts for.

Every release (a retry, a health move, an idle stop, consolidation, a gang timeout) writes the
new attempt first and deletes the old batch Job second; a delete the API server refused, or one
lost with the operator, used to be tried never again, so two attempts ran. And an AcceleratorJob
deleted with ``--cascade=orphan`` (or its batch Job deleted so) leaves pods that run on with no
ledger counting them. :func:`sweep` finds both in a snapshot, a pure function: every batch Job
and pod carrying the operator's labels (the only objects it ever names) that belongs to

- no AcceleratorJob (:attr:`Reason.JOB_GONE`),
- an AcceleratorJob of the same name but another uid, one deleted and created again
  (:attr:`Reason.OTHER_OWNER`; a batch Job whose owner reference the garbage collector removed
  counts as another owner's), or
- an attempt before the job's current one (:attr:`Reason.OLD_ATTEMPT`),

is to be deleted. A pod is named only when its batch Job is gone (deleting the Job takes its pods)
and only while it runs. For the first two, nothing younger than ``grace`` seconds is named: the
watches of jobs, workloads and pods are separate streams, and a workload created a moment ago
may be seen before its job (or its job's new uid); :attr:`Sweep.recheck` says when to look again.
An earlier attempt needs no grace: the status that starts attempt N is written before attempt
N's workload is created, so a job seen on attempt N makes anything of an earlier attempt stale
(a create still in flight for it included). An attempt *after* the job's current one is never
named (only a lagging watch shows that order). A job being deleted is left to the garbage
collector.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Container, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common.snapshot import JobKey, JobView, PodView, WorkloadView


class Reason(enum.Enum):
    """Why a workload or pod is swept (a metric's label values)."""

    JOB_GONE = "job-gone"
    OTHER_OWNER = "other-owner"
    OLD_ATTEMPT = "old-attempt"


class Kind(enum.Enum):
    WORKLOAD = "workload"
    POD = "pod"


@dataclass(frozen=True, slots=True)
class Stray:
    """One object to delete, a batch Job (its pods go with it) or a pod of ours: the job it names
    (``job``: its view when it exists, for the event), what it is and its name, why, and a
    sentence for the event or the log."""

    key: JobKey
    namespace: str
    job: JobView | None
    kind: Kind
    name: str
    reason: Reason
    message: str
    attempt: int | None


@dataclass(frozen=True, slots=True)
class Sweep:
    """The objects to delete, and when a job's objects too young to judge today may be judged."""

    strays: tuple[Stray, ...]
    recheck: tuple[tuple[JobKey, dt.datetime], ...]


def _due(created: dt.datetime | None, reason: Reason, grace: float) -> dt.datetime | None:
    """When an object of ``reason`` created at ``created`` may be deleted (None: never by age)."""
    if reason is Reason.OLD_ATTEMPT:
        return dt.datetime.min.replace(tzinfo=dt.UTC)
    if created is None:  # never for an object the API server returned: touch nothing
        return None
    return created + dt.timedelta(seconds=grace)


def _why(job: JobView | None, attempt: int | None, owner_uid: str | None, *, check_owner: bool) -> Reason | None:
    if job is None:
        return Reason.JOB_GONE
    if job.deleting:
        return None  # the garbage collector's (foreground or background deletion)
    if check_owner and owner_uid != job.uid:
        return Reason.OTHER_OWNER
    if attempt is not None and attempt < job.status.attempt:
        return Reason.OLD_ATTEMPT
    return None


def _stray(kind: Kind, obj: WorkloadView | PodView, key: JobKey, *, job: JobView | None, reason: Reason) -> Stray:
    """``obj`` (of ``key``'s job: a pod's is known by then) as a stray to delete for ``reason``."""
    what = f"batch Job {obj.name}" if kind is Kind.WORKLOAD else f"pod {obj.name}"
    return Stray(
        key=key,
        namespace=obj.namespace,
        job=job if reason is not Reason.JOB_GONE else None,
        kind=kind,
        name=obj.name,
        reason=reason,
        message=_sentence(what, reason, key, obj.attempt, job),
        attempt=obj.attempt,
    )


def _sentence(what: str, reason: Reason, key: JobKey, attempt: int | None, job: JobView | None) -> str:
    if reason is Reason.JOB_GONE:
        return f"{what} of attempt {attempt} runs without its AcceleratorJob {key[1]} (deleted): deleted"
    if reason is Reason.OTHER_OWNER:
        return f"{what} of attempt {attempt} belongs to an earlier AcceleratorJob of this name: deleted"
    current = job.status.attempt if job is not None else "?"
    return f"{what} of attempt {attempt} outlived its attempt (the job is on attempt {current}): deleted"


def sweep(
    jobs: Mapping[JobKey, JobView],
    workloads: Iterable[WorkloadView],
    pods: Iterable[PodView],
    existing: Iterable[tuple[str, str]],
    now: dt.datetime,
    *,
    grace: float,
) -> Sweep:
    """What to delete among ``workloads`` and ``pods`` (those the engine chose to look at), given
    the ``jobs`` and the names of every workload that exists (``existing``: (namespace, name),
    the watched ones and those this process created that the watch has not shown yet)."""
    out: list[Stray] = []
    later: dict[JobKey, dt.datetime] = {}

    def ripe(key: JobKey, created: dt.datetime | None, reason: Reason) -> bool:
        due = _due(created, reason, grace)
        if due is None:
            return False
        if due > now:
            later[key] = min(due, later.get(key, due))
            return False
        return True

    for w in workloads:
        job = jobs.get(w.job)
        reason = _why(job, w.attempt, w.owner_uid, check_owner=True)
        if reason is None or not ripe(w.job, w.created, reason):
            continue
        out.append(_stray(Kind.WORKLOAD, w, w.job, job=job, reason=reason))
    # A mapping or set is asked as it is: the engine passes the snapshot's workloads, every one,
    # on every pass (a copy of it was most of the sweep's cost).
    names: Container[tuple[str, str]] = existing if isinstance(existing, Mapping | AbstractSet) else set(existing)
    for p in pods:
        if p.job is None or p.attempt is None or p.ended or p.finished is not None:
            continue  # ended, or its deletion asked for already (a finalizer may hold it a while)
        if (p.namespace, act.workload_name(p.job[1], p.attempt)) in names:
            continue  # its batch Job takes it when that goes (or it is the job's to run)
        job = jobs.get(p.job)
        reason = _why(job, p.attempt, None, check_owner=False)
        if reason is None or not ripe(p.job, p.created, reason):
            continue
        out.append(_stray(Kind.POD, p, p.job, job=job, reason=reason))
    return Sweep(tuple(out), tuple(sorted(later.items())))
