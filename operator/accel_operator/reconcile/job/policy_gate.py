"""The reconciler's own policy check: the webhook can be bypassed, down, or the policy can change.

Pure, called from ``decide``. A waiting job that breaks a policy is not admitted:

- a refusal (any rule but ``budget-exhausted``) makes it ``Unschedulable`` with the condition
  ``PolicyCompliant=False`` (reason ``PolicyViolation``) whose message names each field, rule and
  policy, and a Warning event; it is evaluated again on every pass, so a policy that changes
  (or a spec that is fixed) lets it through;
- ``budget-exhausted`` (the policy's "accept and queue") keeps it ``Pending`` with
  ``PolicyCompliant=False`` and ``Admitted=False``, reason ``BudgetExhausted``, until spend or
  budget allow it. It blocks no pool. A job that already ran (its next attempt after a preemption
  or a failure) is not held by a budget: it resumes, and is flagged as a holding job is.

A stored policy the models refuse fails closed (``policy-invalid``, a refusal): every job it
would govern waits ``Unschedulable`` with a message naming the policy until it is fixed. A job
in an unlabelled namespace that names a team some labelled namespace holds is refused as the
webhook refuses it (``namespace-team``).

A job that already holds devices is never stopped by a policy: its decision gains
``PolicyCompliant=False`` (reason ``PolicyChanged``) and one Warning event ``PolicyViolation``.
"""

from __future__ import annotations

from dataclasses import replace

from accel_api.enums import JobPhase
from accel_operator.planning import policy
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common import decision
from accel_operator.reconcile.common.decision import ADMITTED, CLEAR, VALID, Cond, Decision, StatusPatch
from accel_operator.reconcile.common.snapshot import HOLDING, JobView, Snapshot

POLICY = "PolicyCompliant"  # the condition type
SHOWN = 5  # violations spelled out in a message; the rest are counted
MEMO_LIMIT = 50_000  # evaluations kept per folded policy inputs


def violations(job: JobView, snapshot: Snapshot) -> list[policy.Violation]:
    """Every breach of the snapshot's policies (and of the namespace's team) by ``job``."""
    inputs = snapshot.policy
    if job.spec is None or not inputs.binds(job.namespace):
        return []
    names = frozenset(snapshot.pools)
    key = (job.uid, job.generation, inputs.pool_sets.setdefault(names, names))
    found = inputs.memo.get(key)
    if found is None:
        if len(inputs.memo) > MEMO_LIMIT:
            inputs.memo.clear()
            inputs.pool_sets.clear()
            inputs.pool_sets[names] = key[2]
        found = inputs.memo[key] = policy.evaluate(
            job.spec,
            inputs.team_of(job.namespace),
            inputs.policies,
            pools={name: p.spec for name, p in snapshot.pools.items()},
            spent=inputs.spent,
            broken=inputs.broken,
            bound_teams=inputs.bound_teams(),
        )
    return found


def describe(found: list[policy.Violation]) -> str:
    text = "; ".join(str(v) for v in found[:SHOWN])
    if len(found) > SHOWN:
        text += f"; and {len(found) - SHOWN} more"
    return decision.clip(text)


def _event_if_new(job: JobView, cond: Cond, type_: str, reason: str, message: str) -> tuple[act.Action, ...]:
    """An event only when the job does not carry this condition with this reason yet."""
    if any(
        c.type == cond.type and c.reason == cond.reason and c.message == cond.message for c in job.status.conditions
    ):
        return ()
    return (act.RecordEvent(type_, reason, message),)


def waiting(job: JobView, snapshot: Snapshot) -> Decision | None:
    """The decision for a waiting job that breaks a policy; None when it breaks none."""
    found = violations(job, snapshot)
    if not found:
        return None
    refused = policy.refusals(found)
    if refused:
        message = describe(refused)
        cond = Cond(POLICY, False, "PolicyViolation", message)
        return Decision(
            phase=JobPhase.UNSCHEDULABLE,
            conditions=(Cond(VALID, True, "SpecValid"), cond),
            status=StatusPatch(plan=CLEAR, workload=CLEAR, message=decision.clip(f"not admitted: {message}")),
            actions=_event_if_new(job, cond, "Warning", "PolicyViolation", message),
            reason=message,
        )
    if _continuing(job):
        # A job that already ran (a preempted or failed attempt to resume) is not a new job: a
        # budget keeps new work out, it does not end work that was admitted. It resumes, and the
        # holding decision says it is over budget.
        return None
    message = describe(found)
    cond = Cond(POLICY, False, "BudgetExhausted", message)
    return Decision(
        phase=JobPhase.PENDING,
        conditions=(Cond(VALID, True, "SpecValid"), cond, Cond(ADMITTED, False, "BudgetExhausted", message)),
        status=StatusPatch(workload=CLEAR, message=decision.clip(f"queued: {message}")),
        actions=_event_if_new(job, cond, "Normal", "BudgetExhausted", message),
        reason=message,
    )


def _continuing(job: JobView) -> bool:
    st = job.status
    return st.attempt > 0 or st.preemptions > 0 or st.retries > 0


def holding(job: JobView, snapshot: Snapshot, decision: Decision) -> Decision:
    """``decision`` for a job that holds devices, with the policies it now breaks said, never enforced."""
    if decision.phase not in HOLDING:
        return decision
    found = violations(job, snapshot)
    if not found:
        return decision
    message = describe(found)
    cond = Cond(POLICY, False, "PolicyChanged", message)
    notice = _event_if_new(
        job, cond, "Warning", "PolicyViolation", f"the job keeps its devices and is not stopped: {message}"
    )
    return replace(decision, conditions=(*decision.conditions, cond), actions=(*decision.actions, *notice))
