"""The admission webhook's logic, without kopf: the review of an AcceleratorJob into the lines
that refuse it, the team a job that names none is given, and the certificate the webhook serves.

On CREATE and UPDATE a job is evaluated against every AcceleratorPolicy and its namespace's team
label (``vocabulary.LABEL_NAMESPACE_TEAM``) with ``planning.policy.evaluate``, the same pure
function the reconciler and ``accelctl validate --policy`` use, and refused with one line per
violation (``field.path: rule by policy 'p' (rule r); fix: ...``). A spec the models refuse is
refused with the models' lines. Budget exhaustion refuses only where the budget says
``onExhausted: refuse``; with ``queue`` (the default) the job is accepted and waits. Objects being
deleted are never refused. ``handlers.admission`` registers these with kopf.

The certificate, without one mounted: a self-signed one whose SANs are ``webhook_host`` and the
Service's DNS names (``SERVICE.NAMESPACE.svc`` and ``...svc.cluster.local``). With
``webhook_tls_secret`` (the Deployment sets it) it is shared by every replica through one Secret
the first replica makes (``adapters.kube.tls``), so the caBundle any replica registers trusts
them all; a shared certificate with fewer than ``RENEW_DAYS`` left is replaced at a replica's
start.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from accel_api import errors
from accel_api.job import AcceleratorJob
from accel_api.policy import AcceleratorPolicy
from accel_operator.adapters.kube import tls
from accel_operator.adapters.kube.tls import TlsPair
from accel_operator.planning import policy
from accel_operator.reconcile.common import policy_inputs
from accel_operator.settings import OperatorSettings

log = logging.getLogger(__name__)


def review(
    body: Mapping[str, Any],
    namespace_team: str | None,
    policies: Iterable[AcceleratorPolicy],
    *,
    broken: Sequence[policy.BrokenPolicy] = (),
    bound_teams: Collection[str] = (),
) -> list[str]:
    """The reasons to refuse ``body`` (an AcceleratorJob), one line each; empty: allowed. The spend
    is the policies' ``status.spend`` (the reconciler's seam too): only a budget that says
    ``onExhausted: refuse`` refuses here; a queueing one lets the job in to wait. A ``broken``
    policy refuses every job it would govern; ``bound_teams`` (the teams some namespace is
    labelled with) may not be named from an unlabelled namespace."""
    if body.get("metadata", {}).get("deletionTimestamp"):
        return []
    try:
        job = AcceleratorJob.model_validate(dict(body))
    except ValidationError as exc:
        return errors.describe(exc, model=AcceleratorJob, limit=errors.MAX_PROBLEMS)
    objects = list(policies)
    spent = policy_inputs.spend_from(objects)
    found = policy.refusals(
        policy.evaluate(job.spec, namespace_team, objects, spent=spent, broken=broken, bound_teams=bound_teams)
    )
    return errors.cap([str(x) for x in found])


def default_team(body: Mapping[str, Any], namespace_team: str | None) -> str | None:
    """The team to write into a job that names none: its namespace's (None: leave it as it is)."""
    spec = body.get("spec")
    if namespace_team is None or not isinstance(spec, Mapping) or spec.get("team"):
        return None
    return namespace_team


def certificate(settings: OperatorSettings, api: Callable[[], Any] | None) -> TlsPair:
    """The shared certificate from the Secret ``webhook_tls_secret`` (made there by the first
    replica); without one (or when it cannot be had: the API server down, a foreign Secret that
    does not serve) a self-signed certificate for this process alone."""
    names = tls.sans_for(settings.webhook_host, settings.webhook_service, settings.webhook_namespace)
    secret = settings.webhook_tls_secret
    if secret and api is not None:
        try:
            found = tls.shared(
                api(),
                settings.webhook_namespace,
                secret,
                lambda: tls.self_signed_pem(names),
                lambda p: tls.serves(p, names),
            )
        except Exception as exc:  # noqa: BLE001 - the webhook still serves; only the replicas may differ
            where = f"{settings.webhook_namespace}/{secret}"
            log.warning("webhook certificate: Secret %s unavailable (%s)", where, str(exc)[:300])
            found = None
        if found is not None:
            return found
        log.warning("webhook certificate: this replica uses its own; the configuration trusts the last to register")
    return tls.self_signed_pem(names)
