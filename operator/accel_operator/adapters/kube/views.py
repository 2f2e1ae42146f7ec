"""Kubernetes objects (wire dicts, as kopf delivers them) as the snapshot's frozen views.

Each function reads only what the decisions need, tolerates missing fields, and returns None for
an object that does not matter (a pod that requests no accelerator and is not ours, a node
without accelerators).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from accel_api import InvalidResource, bounds, patterns
from accel_api import vocabulary as v
from accel_api.base import Condition
from accel_api.durations import parse_time
from accel_api.job import AcceleratorJobSpec, AcceleratorJobStatus, PlanStatus
from accel_api.loader import parse_as
from accel_api.pool import AcceleratorPool
from accel_operator.adapters.kube.interned import Interner
from accel_operator.reconcile.common.snapshot import Admission, JobView, NodeView, PodView, PoolView, WorkloadView

# Job specs, plans and conditions: one parsed value per distinct wire value (see ``interned``).
SHARED = Interner()

DEVICE_RESOURCES = (v.RESOURCE_NVIDIA_GPU, v.RESOURCE_GOOGLE_TPU)
MANAGED_BY = v.MANAGED_BY_VALUE


def _quantity(text: Any) -> int:
    """A device count as Kubernetes writes it ("8"); anything else counts as 0."""
    try:
        return max(0, int(str(text)))
    except ValueError:
        return 0


def _meta(body: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = body.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _time(text: Any) -> dt.datetime:
    """A timestamp Kubernetes always writes (creation); now when it is unreadable."""
    return parse_time(str(text)) or dt.datetime.now(dt.UTC)


# Longer values are not cloud provider ids (the longest real ones are about 100 characters).
_PROVIDER_ID_LENGTH = 256
# A checkpoint-now request the operator wrote is at most early_warning.TOKEN_LENGTH; anyone's
# longer value is clipped (it is only compared, never echoed whole).
_CHECKPOINT_NOW_LENGTH = 256


def node_view(body: Mapping[str, Any]) -> NodeView | None:
    status = body.get("status") or {}
    alloc = status.get("allocatable") or {}
    devices = sum(_quantity(alloc.get(r)) for r in DEVICE_RESOURCES)
    if not devices:
        return None
    cap = status.get("capacity") or {}
    capacity = sum(_quantity(cap.get(r)) for r in DEVICE_RESOURCES) if isinstance(cap, Mapping) else 0
    meta, spec = _meta(body), body.get("spec") or {}
    taints = {t.get("key") for t in spec.get("taints") or [] if isinstance(t, Mapping)}
    termination = frozenset(k for k in taints if isinstance(k, str) and k in v.TERMINATION_TAINTS)
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    return NodeView(
        name=str(meta.get("name")),
        labels=dict(meta.get("labels") or {}),
        devices=devices,
        ready=ready,
        unschedulable=bool(spec.get("unschedulable")),
        terminating=bool(termination),
        deleting=meta.get("deletionTimestamp") is not None,
        health_taint=v.TAINT_DEVICE_UNHEALTHY in taints,
        uid=str(meta.get("uid") or "")[:64],
        provider_id=str(spec.get("providerID") or "")[:_PROVIDER_ID_LENGTH],
        termination_taints=termination,
        capacity_devices=capacity or None,
    )


def _pod_devices(spec: Mapping[str, Any]) -> int:
    total = 0
    for c in spec.get("containers") or []:
        res = (c.get("resources") or {}) if isinstance(c, Mapping) else {}
        req = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        total += sum(_quantity(req.get(r)) for r in DEVICE_RESOURCES)
    return total


def pod_view(body: Mapping[str, Any]) -> PodView | None:
    meta, spec, status = _meta(body), body.get("spec") or {}, body.get("status") or {}
    labels = meta.get("labels") or {}
    devices = _pod_devices(spec)
    job_name = (meta.get("annotations") or {}).get(v.ANNOTATION_JOB_NAME) or labels.get(v.LABEL_JOB)
    ours = labels.get(v.LABEL_MANAGED_BY) == MANAGED_BY and job_name
    if not devices and not ours:
        return None
    namespace = str(meta.get("namespace"))
    exit_code = None
    finished: dt.datetime | None = None
    for cs in status.get("containerStatuses") or []:
        term = ((cs or {}).get("state") or {}).get("terminated")
        if term and (at := _maybe_time(term.get("finishedAt"))) is not None:
            finished = max(finished, at) if finished is not None else at
        if term and term.get("exitCode") is not None and exit_code in (None, 0):
            exit_code = int(term["exitCode"])
    disrupted = any(
        c.get("type") == v.CONDITION_DISRUPTION_TARGET and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    attempt = labels.get(v.LABEL_ATTEMPT)
    unschedulable = next(
        (
            c
            for c in status.get("conditions") or []
            if isinstance(c, Mapping)
            and c.get("type") == "PodScheduled"
            and c.get("status") == "False"
            and c.get("reason") == "Unschedulable"
        ),
        None,
    )
    request = (meta.get("annotations") or {}).get(v.ANNOTATION_CHECKPOINT_NOW)
    reported = (meta.get("annotations") or {}).get(v.ANNOTATION_CHECKPOINT) if ours else None
    return PodView(
        namespace=namespace,
        name=str(meta.get("name")),
        node=spec.get("nodeName"),
        phase=str(status.get("phase") or "Pending"),
        devices=devices,
        job=(namespace, str(job_name)) if ours else None,
        attempt=int(attempt) if ours and attempt and attempt.isdigit() else None,
        exit_code=exit_code,
        reason=status.get("reason"),
        disrupted=disrupted,
        checkpoint_now=str(request)[:_CHECKPOINT_NOW_LENGTH] if request else None,
        # Tenant-written: clipped here (one character over the bound is enough to refuse it),
        # checked against the job's checkpoint URI by reconcile.resume before any use.
        reported_checkpoint=reported[: bounds.URI_LENGTH + 1] if isinstance(reported, str) else None,
        unschedulable_since=_maybe_time(unschedulable.get("lastTransitionTime"))
        if unschedulable is not None and not spec.get("nodeName")
        else None,
        created=_maybe_time(meta.get("creationTimestamp")),
        started=_maybe_time(status.get("startTime")),
        finished=finished or _deletion_asked(meta),
        uid=str(meta["uid"]) if meta.get("uid") else None,
        held=bool(ours) and v.FINALIZER_LEDGER in (meta.get("finalizers") or ()),
        pool=str(labels.get(v.LABEL_POOL))[:63] if ours and labels.get(v.LABEL_POOL) else None,
    )


def _deletion_asked(meta: Mapping[str, Any]) -> dt.datetime | None:
    """When a pod's deletion was asked for: its deletionTimestamp less its grace period (the API
    server sets the one to the time of the request plus the other)."""
    at = _maybe_time(meta.get("deletionTimestamp"))
    grace = meta.get("deletionGracePeriodSeconds")
    if at is None:
        return None
    if isinstance(grace, int) and not isinstance(grace, bool) and 0 < grace <= 86_400:
        return at - dt.timedelta(seconds=grace)
    return at


def workload_view(body: Mapping[str, Any]) -> WorkloadView | None:
    meta, status = _meta(body), body.get("status") or {}
    labels = meta.get("labels") or {}
    if labels.get(v.LABEL_MANAGED_BY) != MANAGED_BY or not labels.get(v.LABEL_JOB):
        return None
    namespace = str(meta.get("namespace"))
    attempt = str(labels.get(v.LABEL_ATTEMPT, "0"))
    conds = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, Mapping)}
    failed = conds.get("Failed") or conds.get("FailureTarget")
    complete = conds.get("Complete") or conds.get("SuccessCriteriaMet")
    return WorkloadView(
        namespace=namespace,
        name=str(meta.get("name")),
        job=(namespace, str((meta.get("annotations") or {}).get(v.ANNOTATION_JOB_NAME) or labels[v.LABEL_JOB])),
        attempt=int(attempt) if attempt.isdigit() else 0,
        active=int(status.get("active") or 0),
        ready=int(status.get("ready") or 0),
        succeeded=int(status.get("succeeded") or 0),
        failed=int(status.get("failed") or 0),
        complete=bool(complete and complete.get("status") == "True"),
        failed_condition=bool(failed and failed.get("status") == "True"),
        failure_reason=(failed or {}).get("reason"),
        failure_message=(failed or {}).get("message"),
        start_time=_maybe_time(status.get("startTime")),
        end_time=_maybe_time(status.get("completionTime"))
        or _maybe_time(_true_since(complete))
        or _maybe_time(_true_since(failed)),
        owner_uid=_owner_uid(meta),
        created=_maybe_time(meta.get("creationTimestamp")),
        admission=admission_of((meta.get("annotations") or {}).get(v.ANNOTATION_ADMISSION)),
    )


def admission_note(a: Admission) -> str:
    """The ``accel.dev/admission`` annotation of an attempt's batch Job (compact JSON)."""
    body: dict[str, Any] = {
        "attempt": a.attempt,
        "pool": a.pool,
        "devices": a.devices,
        "nodes": a.nodes,
        "admittedTime": a.admitted_time,
    }
    if a.accelerator:
        body["accelerator"] = a.accelerator
    if a.capacity_type:
        body["capacityType"] = a.capacity_type
    if a.duration_seconds is not None:
        body["durationSeconds"] = a.duration_seconds
    if a.cost_usd is not None:
        body["costUsd"] = a.cost_usd
    return json.dumps(body, separators=(",", ":"))


def admission_of(text: object) -> Admission | None:
    """The admission an ``accel.dev/admission`` annotation says (None: absent, or not one the
    operator wrote: it is then no admission, and the job is decided from its status alone)."""
    if not isinstance(text, str) or len(text) > 2048:
        return None
    try:
        body = json.loads(text)
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    attempt, pool, devices, nodes, admitted = (
        body.get(k) for k in ("attempt", "pool", "devices", "nodes", "admittedTime")
    )
    ints = all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in (attempt, devices, nodes))
    if not ints or not nodes or not isinstance(pool, str) or not 0 < len(pool) <= 253 or not isinstance(admitted, str):
        return None
    if parse_time(admitted) is None:
        return None

    def number(key: str) -> float | None:
        x = body.get(key)
        return float(x) if isinstance(x, int | float) and not isinstance(x, bool) and x >= 0 else None

    def text_of(key: str) -> str:
        x = body.get(key)
        return x[: bounds.SHORT_TEXT_LENGTH] if isinstance(x, str) else ""

    return Admission(
        attempt=int(attempt),  # type: ignore[arg-type]  # checked: an int
        pool=pool,
        devices=int(devices),  # type: ignore[arg-type]
        nodes=int(nodes),
        admitted_time=admitted,
        accelerator=text_of("accelerator"),
        capacity_type=text_of("capacityType"),
        duration_seconds=number("durationSeconds"),
        cost_usd=number("costUsd"),
    )


def _owner_uid(meta: Mapping[str, Any]) -> str | None:
    """The controller owner's uid, clipped (an object's owner references are anyone's to write)."""
    for ref in meta.get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller") and isinstance(ref.get("uid"), str):
            return str(ref["uid"])[: bounds.SHORT_TEXT_LENGTH]
    return None


def _true_since(cond: Mapping[str, Any] | None) -> Any:
    return cond.get("lastTransitionTime") if cond and cond.get("status") == "True" else None


def _maybe_time(text: Any) -> dt.datetime | None:
    """A timestamp Kubernetes wrote, or None when absent or unreadable (never "now")."""
    if not isinstance(text, str) or len(text) > bounds.TIME_LENGTH:
        return None
    return parse_time(text)


def pool_view(body: Mapping[str, Any]) -> tuple[PoolView | None, tuple[str, ...]]:
    """The pool, or None and why it is invalid (an invalid pool never stops the others)."""
    name = str(_meta(body).get("name", "?"))
    try:
        pool = parse_as(AcceleratorPool, dict(body))
    except InvalidResource as exc:
        return None, tuple(f"{name}: {p}" for p in exc.problems)
    return PoolView(name=name, spec=pool.spec), ()


def _job_spec(raw: dict[str, Any]) -> tuple[AcceleratorJobSpec | None, tuple[str, ...]]:
    try:
        return parse_as(AcceleratorJobSpec, raw), ()
    except InvalidResource as exc:
        return None, tuple(exc.problems)


def _plan(raw: Any) -> PlanStatus:
    return PlanStatus.model_validate(raw)


def _condition(raw: Any) -> Condition:
    return Condition.model_validate(raw)


def job_status(wire: Mapping[str, Any], *, plan_model: PlanStatus | None = None) -> AcceleratorJobStatus:
    """A job's status (wire form), its plan and conditions shared with the jobs that carry the
    same ones (the same validation as one ``model_validate`` of the whole: raises ValueError the
    same way). The scheduler's overlay of statuses it wrote uses it too: parsed whole, each held
    its own plan and conditions (about 11 KB a job) until the watch showed the write.
    ``plan_model``: the model ``wire["plan"]`` was made from, when the caller has it (the plan a
    decision wrote, shared by every job of that plan): taken as it is instead of parsed again."""
    raw = dict(wire)
    plan, conditions = raw.pop("plan", None), raw.pop("conditions", None)
    status = AcceleratorJobStatus.model_validate(raw)
    update: dict[str, Any] = {}
    if plan is not None:
        update["plan"] = plan_model if plan_model is not None else SHARED.get("plan", plan, _plan)
    if conditions is not None:
        if not isinstance(conditions, list):
            raise ValueError("status.conditions: not a list")
        update["conditions"] = [SHARED.get("condition", c, _condition) for c in conditions[: bounds.CONDITIONS_ITEMS]]
    return status.model_copy(update=update) if update else status


STATUS_FIELDS = {info.alias or name: name for name, info in AcceleratorJobStatus.model_fields.items()}


def job_status_patched(
    before: AcceleratorJobStatus,
    wire: Mapping[str, Any],
    fields: Iterable[str],
    *,
    plan_model: PlanStatus | None = None,
) -> AcceleratorJobStatus:
    """The status ``wire`` holds, given ``before``, the model of what it held before the fields
    ``fields`` (wire names) were patched: those fields validated again (as :func:`job_status`
    does: equal plans and conditions shared, ``plan_model`` taken for the plan), the others kept.
    What ``job_status(wire)`` gives, as the status has no rule across its fields (each is validated
    on its own), without validating again what the patch left as it was. A name the model does not
    know is validated whole, to be refused as a full parse refuses it; no field: a full parse."""
    written = list(fields)
    names = [STATUS_FIELDS.get(k) for k in written]
    if not written or None in names or AcceleratorJobStatus.cel_rules:
        return job_status(wire, plan_model=plan_model)
    part = job_status({k: wire[k] for k in written if k in wire}, plan_model=plan_model)
    return before.model_copy(update={n: getattr(part, n) for n in names if n is not None})


def job_view(body: Mapping[str, Any]) -> JobView:
    meta = _meta(body)
    spec, problems = SHARED.get("spec", dict(body.get("spec") or {}), _job_spec)
    try:
        status = job_status(body.get("status") or {})
    except ValueError:
        status = AcceleratorJobStatus()  # unreadable status (hand-edited): decide from scratch
    return JobView(
        namespace=str(meta.get("namespace")),
        name=str(meta.get("name")),
        uid=str(meta.get("uid", "")),
        created=_time(meta.get("creationTimestamp")),
        generation=meta.get("generation"),
        spec=spec,
        spec_problems=problems,
        status=status,
        deleting=meta.get("deletionTimestamp") is not None,
        resource_version=meta.get("resourceVersion"),
        resume_request=_digest((meta.get("annotations") or {}).get(v.ANNOTATION_RESUME)),
        stop_request=_digest((meta.get("annotations") or {}).get(v.ANNOTATION_STOP)),
        spec_team=_team_of(body.get("spec")) if spec is None else "",
    )


def _team_of(spec: Any) -> str:
    """The team field of a spec that does not parse, when that field alone is valid (a DNS label)."""
    team = spec.get("team") if isinstance(spec, Mapping) else None
    if isinstance(team, str) and len(team) <= bounds.DNS_LABEL_LENGTH and re.fullmatch(patterns.DNS_LABEL, team):
        return team
    return ""


def _digest(value: Any) -> str | None:
    """A short digest of a user's annotation: compared and kept in status, never echoed."""
    if not isinstance(value, str) or not value:
        return None
    return hashlib.blake2b(value.encode(errors="replace"), digest_size=8).hexdigest()
