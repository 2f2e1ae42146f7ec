"""kopf handlers for AcceleratorJob: validate the spec, plan it against the pools, write status.

Reconciles by level: planning is a pure function of (spec, pools), so running a handler twice,
or after a crash, writes the same status. Admission, workload creation, preemption recovery and
cost accounting are not built yet; a planned job stays ``Pending`` with its plan in the status.
"""

import asyncio
import datetime as dt
from collections.abc import Mapping
from typing import Any

import kopf

from accel_api import InvalidResource, bounds, registry
from accel_api import vocabulary as v
from accel_api.enums import JobPhase
from accel_api.job import AcceleratorJobSpec
from accel_api.loader import parse_as
from accel_operator.adapters.kube import ClusterUnavailable, KubePoolSource, PoolSource
from accel_operator.planning import catalog as catalog_mod
from accel_operator.planning import select
from accel_operator.settings import OperatorSettings

PLURAL = registry.JOB.plural
# kopf fixes a timer's interval when the handler is declared, so this one setting is read at import.
REPLAN_SECONDS = OperatorSettings().replan_seconds
WAITING = (JobPhase.PENDING.value, JobPhase.UNSCHEDULABLE.value)


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(type_: str, ok: bool, reason: str, message: str, generation: int | None) -> dict[str, Any]:
    return {
        "type": type_,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message[:1000],
        "lastTransitionTime": _now(),
        "observedGeneration": generation,
    }


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """In-cluster ServiceAccount first, else the KUBECONFIG read at this moment (not at import)."""
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


@kopf.on.startup()
def configure(*, settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # Progress and the last-handled state live in annotations under our own prefix: the status
    # schema is structural and would prune kopf's default status.kopf field.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=v.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=v.GROUP, key="last-handled-configuration"
    )
    settings.posting.level = 30  # post Kubernetes events for warnings and errors only
    own = OperatorSettings()
    memo.settings = own
    memo.catalog = catalog_mod.load(own.catalog)
    if not hasattr(memo, "pools"):
        memo.pools = KubePoolSource()


def plan_status(spec_body: dict[str, Any], generation: int | None, pools: PoolSource, catalog: Any) -> dict[str, Any]:
    """The status a job should have now: a pure function of its spec and the inventory."""
    try:
        spec = parse_as(AcceleratorJobSpec, spec_body)
    except InvalidResource as exc:
        message = "; ".join(f"spec.{p}" if not p.startswith("spec") else p for p in exc.problems)
        return {
            "phase": JobPhase.FAILED.value,
            "plan": None,  # a merge patch with null removes an earlier plan
            "message": bounds.clip_message(message),
            "observedGeneration": generation,
            "conditions": [_condition("Valid", False, "InvalidSpec", message, generation)],
        }
    inventory = pools.inventory()
    decision = select.plan(spec, inventory.offers(), catalog)
    # Every field, unset ones as null, so that the merge patch clears what an earlier plan set.
    status_plan = decision.to_status().model_dump(by_alias=True, mode="json")
    schedulable = decision.schedulable
    message = status_plan.get("reason", "")
    if inventory.invalid:
        message += f" (ignored invalid pools: {'; '.join(inventory.invalid)})"
    return {
        "phase": (JobPhase.PENDING if schedulable else JobPhase.UNSCHEDULABLE).value,
        "plan": status_plan,
        "message": bounds.clip_message(message),
        "observedGeneration": generation,
        "conditions": [
            _condition("Valid", True, "SpecValid", "spec is valid", generation),
            _condition("Planned", schedulable, "Planned" if schedulable else "NoPlacement", message, generation),
        ],
    }


async def _plan(spec: kopf.Spec, meta: kopf.Meta, memo: kopf.Memo) -> dict[str, Any]:
    """Plan off the event loop; the one place where adapter errors become kopf's retry policy."""
    try:
        return await asyncio.to_thread(plan_status, dict(spec), meta.get("generation"), memo.pools, memo.catalog)
    except ClusterUnavailable as exc:
        raise kopf.TemporaryError(str(exc), delay=10) from exc


def _pruned(value: Any) -> Any:
    """``value`` without null entries: how the API server stores what a merge patch wrote."""
    if isinstance(value, dict):
        return {k: _pruned(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


def settle(old: Mapping[str, Any] | None, new: dict[str, Any]) -> dict[str, Any] | None:
    """``new`` with each condition keeping its ``lastTransitionTime`` while its status holds;
    None when writing it would change nothing (so a periodic re-plan costs no write)."""
    before = {c.get("type"): c for c in (old or {}).get("conditions", []) or []}
    conditions = []
    for cond in new.get("conditions", []):
        prior = before.get(cond["type"])
        if prior is not None and prior.get("status") == cond["status"] and prior.get("lastTransitionTime"):
            cond = {**cond, "lastTransitionTime": prior["lastTransitionTime"]}  # noqa: PLW2901
        conditions.append(cond)
    settled = {**new, "conditions": conditions}
    current = {k: _pruned((old or {}).get(k)) for k in settled}
    return None if _pruned(settled) == current else settled


@kopf.on.resume(v.GROUP, v.VERSION, PLURAL)
@kopf.on.create(v.GROUP, v.VERSION, PLURAL)
@kopf.on.update(v.GROUP, v.VERSION, PLURAL, field="spec")
async def plan_job(
    *,
    spec: kopf.Spec,
    meta: kopf.Meta,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: kopf.Memo,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    new = await _plan(spec, meta, memo)
    written = settle(dict(status), new) or new
    patch.status.update(written)
    if written["phase"] == JobPhase.FAILED.value:
        logger.warning(f"invalid AcceleratorJob: {written['message']}")
    else:
        logger.info(f"planned: {written['phase']}: {written['message']}")


@kopf.timer(v.GROUP, v.VERSION, PLURAL, interval=REPLAN_SECONDS, initial_delay=REPLAN_SECONDS)
async def replan_waiting_job(
    *,
    spec: kopf.Spec,
    meta: kopf.Meta,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: kopf.Memo,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    """Converge on the pools as they are now: a job that waits is planned again, and its status is
    written only when the plan changed (pools appeared, grew, vanished or changed price)."""
    if status.get("phase") not in WAITING:
        return
    new = await _plan(spec, meta, memo)
    settled = settle(dict(status), new)
    if settled is not None:
        patch.status.update(settled)
        logger.info(f"re-planned: {settled['phase']}: {settled['message']}")
