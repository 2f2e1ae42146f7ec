"""kopf handlers for AcceleratorJob: validate the spec, plan it against the pools, write status.

Reconciles by level: planning is a pure function of (spec, pools), so running a handler twice,
or after a crash, writes the same status. Admission, workload creation, preemption recovery and
cost accounting are not built yet; a planned job stays ``Pending`` with its plan in the status.
"""

import asyncio
import datetime as dt
from typing import Any

import kopf

from accel_api import InvalidResource, registry
from accel_api import vocabulary as v
from accel_api.enums import JobPhase
from accel_api.job import AcceleratorJobSpec
from accel_api.loader import parse_as
from accel_operator.adapters.kube import KubePoolSource, PoolSource
from accel_operator.planning import catalog as catalog_mod
from accel_operator.planning import select
from accel_operator.settings import OperatorSettings

PLURAL = registry.JOB.plural


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
            "message": message,
            "observedGeneration": generation,
            "conditions": [_condition("Valid", False, "InvalidSpec", message, generation)],
        }
    inventory = pools.inventory()
    decision = select.plan(spec, inventory.offers(), catalog)
    status_plan = decision.to_status().to_wire()
    schedulable = decision.schedulable
    message = status_plan.get("reason", "")
    if inventory.invalid:
        message += f" (ignored invalid pools: {'; '.join(inventory.invalid)})"
    return {
        "phase": (JobPhase.PENDING if schedulable else JobPhase.UNSCHEDULABLE).value,
        "plan": status_plan,
        "message": message,
        "observedGeneration": generation,
        "conditions": [
            _condition("Valid", True, "SpecValid", "spec is valid", generation),
            _condition("Planned", schedulable, "Planned" if schedulable else "NoPlacement", message, generation),
        ],
    }


@kopf.on.resume(v.GROUP, v.VERSION, PLURAL)
@kopf.on.create(v.GROUP, v.VERSION, PLURAL)
@kopf.on.update(v.GROUP, v.VERSION, PLURAL, field="spec")
async def plan_job(
    *, spec: kopf.Spec, meta: kopf.Meta, patch: kopf.Patch, memo: kopf.Memo, logger: kopf.Logger, **_: Any
) -> None:
    status = await asyncio.to_thread(plan_status, dict(spec), meta.get("generation"), memo.pools, memo.catalog)
    patch.status.update(status)
    if status["phase"] == JobPhase.FAILED.value:
        logger.warning(f"invalid AcceleratorJob: {status['message']}")
    else:
        logger.info(f"planned: {status['phase']}: {status['message']}")
