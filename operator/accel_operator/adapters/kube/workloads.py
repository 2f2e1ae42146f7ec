"""One attempt of an AcceleratorJob as Kubernetes objects, and the port that creates them.

``build`` is pure: a ``WorkloadSpec`` (the plan of one attempt) in, a ``batch/v1`` Job and, for
a gang of several nodes, its headless ``v1`` Service out, as wire dicts. The Job is Indexed (one pod per node, all or
nothing), never retried by Kubernetes (``backoffLimit: 0``) and ends with a ``podFailurePolicy``
rule that tells a disruption (``RULE_DISRUPTION``: the operator starts a new attempt) from a
failure of the program (``RULE_EXIT_CODE``); ``failed_rule`` reads which one ended it.

``WorkloadClient`` is the port: ``KubeWorkloadClient`` talks to the API server,
``FakeWorkloadClient`` records calls for unit tests. Creating is idempotent: names are
deterministic per attempt (``workload_name``) and an existing workload of the same owner is not
an error, so a retried reconcile never makes a second one.

Decisions worth knowing:

- Tenant env comes after ours. Reserved names (``vocabulary.is_reserved_env`` plus a policy's
  additions) are refused again here (``ReservedEnv``), although the API model already refuses
  them: a workload is the last place a forged object could be stopped. torch.distributed's
  rendezvous names (``vocabulary.RENDEZVOUS_ENV``: MASTER_ADDR, MASTER_PORT, WORLD_SIZE,
  NODE_RANK) are *not* reserved: they are conventions of launchers, not the operator's contract (launchers disagree on
  what ``WORLD_SIZE`` counts), so a tenant value replaces ours (one entry, no duplicate). The
  operator's own copies (``ACCEL_NODE_RANK``, ``ACCEL_NNODES``, ``ACCEL_DEVICES``) and the
  Service cannot be overridden.
- The headless Service exists only for a gang of several nodes: it gives the pods the DNS names
  (``<workload>-<index>.<workload>``) the other nodes reach rank 0 and each other by. A one-node
  attempt has no one to meet: its ``MASTER_ADDR`` is the loopback address and it gets no Service
  (one API write fewer per admission, and one object fewer per running job).
- The container may not gain privileges (no escalation, every capability dropped, the
  runtime's seccomp profile) but ``runAsNonRoot`` is not forced: tenant images vary and many
  training images run as root; a platform that wants it adds a Pod Security admission level.
- No ``activeDeadlineSeconds``: the operator enforces deadlines (and tells a deadline from a
  failure in the job's status). No service-account token and no service links: a training
  program needs neither, and service links would add env the contract does not name.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from accel_api import errors, registry
from accel_api import vocabulary as v
from accel_api.catalog import Accelerator
from accel_api.enums import AcceleratorKind, TaintEffect, TolerationOperator
from accel_api.job import AcceleratorJobSpec
from accel_api.pool import AcceleratorPoolSpec, Toleration
from accel_operator.adapters.kube import views
from accel_operator.adapters.kube.client import ClusterUnavailable, api_client
from accel_operator.reconcile.common import actions
from accel_operator.reconcile.common.snapshot import Admission

CONTAINER: Final = "main"
# podFailurePolicy rules, in this order: the Job's FailureTarget/Failed condition names the index.
RULE_DISRUPTION: Final = 0  # a pod got DisruptionTarget=True (preemption, eviction, node lost)
RULE_EXIT_CODE: Final = 1  # the main container exited non-zero: a failure of the program
# A final checkpoint after SIGTERM: AWS warns 2 minutes ahead, this is the whole of it.
TERMINATION_GRACE_SECONDS: Final = 120
# Room in a 63-character DNS label for the Indexed Job's "-<index>" hostname suffix, for the
# largest gang the API allows (bounds.NODES: index 65535).
_INDEX_SUFFIX: Final = len("-65535")
MAX_NAME_LENGTH: Final = 63 - _INDEX_SUFFIX
LABEL_VALUE_LENGTH: Final = 63
# Multi-host TPU: every host's name goes into one env value. The largest slices have ~2300
# hosts; this bound keeps the value (and the Job) far below the API server's request limit.
MAX_TPU_HOSTS: Final = 4096
_HASH: Final = 8
_FAILED_RULE: Final = re.compile(r"matching FailJob rule at index (\d+)")
_ANNOTATIONS_VOLUME: Final = "accel-annotations"
_CHECKPOINT_VOLUME: Final = "accel-checkpoint"
_MESSAGE_LENGTH: Final = 1024
# A one-node attempt's rendezvous: rank 0 is the pod itself.
LOOPBACK: Final = "127.0.0.1"


class UnbuildableWorkload(ValueError):
    """The spec cannot become a workload (an inconsistent plan, a forbidden env name)."""


class ReservedEnv(UnbuildableWorkload):
    """A tenant env name the operator or the container runtime owns (defence in depth)."""


class WorkloadRejected(RuntimeError):
    """The API server refused the workload (422 invalid, 403 forbidden or quota, 400, 413):
    retrying the same objects will not help. ``message`` is the server's, clipped."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class WorkloadConflict(RuntimeError):
    """An object of the workload's name exists but belongs to another owner (an AcceleratorJob
    deleted and created again under the same name before the old workload was collected):
    retry later, never adopt it."""


@dataclass(frozen=True)
class WorkloadSpec:
    """What one attempt of one AcceleratorJob needs."""

    job_name: str
    namespace: str
    job_uid: str
    spec: AcceleratorJobSpec
    attempt: int  # 0, 1, 2 ...
    pool_name: str
    pool: AcceleratorPoolSpec
    accelerator: Accelerator
    devices: int  # whole job
    nodes: int  # pods, one per node
    resume_from: str | None = None  # the latest complete checkpoint, or None
    reserved_env: tuple[str, ...] = ()  # a policy's additions (spec.reservedEnv), same notation
    avoid_nodes: tuple[str, ...] = ()  # nodes kept for a gang this attempt must not take (consolidation)
    # The admission the Job records in its accel.dev/admission annotation (the Job is created before
    # the job's status says Admitted: docs/scale.md, "The batch Job as the admission record").
    admission: Admission | None = None

    @property
    def name(self) -> str:
        return workload_name(self.job_name, self.attempt)

    @property
    def devices_per_pod(self) -> int:
        return self.devices // self.nodes


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:_HASH]


def workload_name(job_name: str, attempt: int) -> str:
    """The Job's and the Service's name for one attempt (``reconcile.names``: the decision
    records the same name in the job's status before the workload exists)."""
    if attempt < 0:
        raise UnbuildableWorkload(f"attempt must be >= 0 (got {attempt})")
    return actions.workload_name(job_name, attempt)


def label_value(value: str) -> str:
    """``value`` if it fits a label value, else its first characters and a stable hash."""
    if len(value) <= LABEL_VALUE_LENGTH:
        return value
    head = value[: LABEL_VALUE_LENGTH - _HASH - 1].rstrip("-._")
    return f"{head}-{_digest(value)}"


def labels(w: WorkloadSpec) -> dict[str, str]:
    """The labels on the Job, its pods and the Service: back to the AcceleratorJob."""
    return {
        v.LABEL_JOB: label_value(w.job_name),
        v.LABEL_TEAM: w.spec.team,
        v.LABEL_POOL: label_value(w.pool_name),
        v.LABEL_ATTEMPT: str(w.attempt),
        v.LABEL_MANAGED_BY: v.MANAGED_BY_VALUE,
    }


def selector(w: WorkloadSpec) -> dict[str, str]:
    """The pods of this attempt (the Service's selector, the gang's anti-affinity)."""
    return {v.LABEL_JOB: label_value(w.job_name), v.LABEL_ATTEMPT: str(w.attempt)}


def owner_reference(w: WorkloadSpec) -> dict[str, Any]:
    return {
        "apiVersion": v.API_VERSION,
        "kind": registry.JOB.kind,
        "name": w.job_name,
        "uid": w.job_uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _check(w: WorkloadSpec) -> None:
    if w.nodes < 1 or w.devices < w.nodes or w.devices % w.nodes:
        raise UnbuildableWorkload(
            f"devices ({w.devices}) must be a positive multiple of nodes ({w.nodes}): one pod per node"
        )
    if w.accelerator.kind is AcceleratorKind.TPU and w.nodes > MAX_TPU_HOSTS:
        raise UnbuildableWorkload(f"a multi-host TPU slice of {w.nodes} hosts is more than {MAX_TPU_HOSTS}")
    for var in w.spec.env:
        if v.is_reserved_env(var.name, w.reserved_env):
            raise ReservedEnv(
                f"spec.env: {errors.clip(var.name)} is reserved for the operator or the container runtime"
            )


def _field(path: str) -> dict[str, Any]:
    return {"fieldRef": {"fieldPath": path}}


def _index() -> dict[str, Any]:
    return _field(f"metadata.annotations['{v.ANNOTATION_JOB_COMPLETION_INDEX}']")


def _env(w: WorkloadSpec) -> list[dict[str, Any]]:
    name = w.name
    ours: list[tuple[str, str | dict[str, Any]]] = [
        (v.ENV_JOB_NAME, w.job_name),
        (v.ENV_TEAM, w.spec.team),
        (v.ENV_ATTEMPT, str(w.attempt)),
        (v.ENV_DEVICES, str(w.devices)),
        (v.ENV_ACCELERATOR, w.accelerator.id),
    ]
    if w.spec.checkpoint is not None:
        ours.append((v.ENV_CHECKPOINT_URI, w.spec.checkpoint.uri))
        seconds = max(1, round(w.spec.checkpoint.interval_minutes * 60))
        ours.append((v.ENV_CHECKPOINT_INTERVAL_SECONDS, str(seconds)))
    claim = pvc_checkpoint(w)
    if claim is not None:
        ours.append((v.ENV_CHECKPOINT_DIR, v.CHECKPOINT_MOUNT_DIR))
        ours.append((v.ENV_RESUME_FROM_DIR, _resume_dir(w, claim)))
    ours += [
        (v.ENV_RESUME_FROM, w.resume_from or ""),
        (v.ENV_NODE_RANK, _index()),
        (v.ENV_NNODES, str(w.nodes)),
        (v.ENV_NPROC_PER_NODE, str(w.devices_per_pod)),
    ]
    master = f"{name}-0.{name}" if w.nodes > 1 else LOOPBACK
    rendezvous: list[tuple[str, str | dict[str, Any]]] = [
        (v.RDZV_MASTER_ADDR, master),
        (v.RDZV_MASTER_PORT, str(v.RENDEZVOUS_PORT)),
        (v.RDZV_WORLD_SIZE, str(w.devices)),
        (v.RDZV_NODE_RANK, _index()),
    ]
    tenant_names = {var.name for var in w.spec.env}
    ours += [(k, val) for k, val in rendezvous if k not in tenant_names]
    if w.accelerator.kind is AcceleratorKind.TPU and w.nodes > 1:
        ours.append((v.ENV_TPU_WORKER_ID, _index()))
        ours.append((v.ENV_TPU_WORKER_HOSTNAMES, ",".join(f"{name}-{i}.{name}" for i in range(w.nodes))))
    out = [{"name": k, "value": val} if isinstance(val, str) else {"name": k, "valueFrom": val} for k, val in ours]
    out += [{"name": var.name, "value": var.value} for var in w.spec.env]
    return out


def pvc_checkpoint(w: WorkloadSpec) -> tuple[str, str] | None:
    """(claim, path) of a ``pvc://<claim>/<path>`` checkpoint URI; None for S3 or no checkpoint.
    The model has checked the URI (a DNS-label claim; no '.', '..' or empty segments)."""
    if w.spec.checkpoint is None or w.spec.checkpoint.scheme != "pvc":
        return None
    claim, _, path = w.spec.checkpoint.uri.removeprefix("pvc://").partition("/")
    return claim, path


def _resume_dir(w: WorkloadSpec, claim: tuple[str, str]) -> str:
    """The mounted directory of ``w.resume_from`` (``pvc://<claim>/<path>/step-<N>``), or "".
    Only a step directly under the job's own URI maps (resume.under checked it already)."""
    uri = w.spec.checkpoint.uri if w.spec.checkpoint is not None else ""
    step = (w.resume_from or "").removeprefix(uri + "/")
    if not w.resume_from or step == w.resume_from or "/" in step or not step.startswith(v.CHECKPOINT_STEP_PREFIX):
        return ""
    return f"{v.CHECKPOINT_MOUNT_DIR}/{step}"


def _checkpoint_volume(w: WorkloadSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The claim of a pvc:// checkpoint as (volumes, volumeMounts): its path mounted read-write at
    CHECKPOINT_MOUNT_DIR, the same on every attempt (kubelet makes the sub-path if it is missing)."""
    claim = pvc_checkpoint(w)
    if claim is None:
        return [], []
    name, path = claim
    mount: dict[str, Any] = {"name": _CHECKPOINT_VOLUME, "mountPath": v.CHECKPOINT_MOUNT_DIR}
    if path:
        mount["subPath"] = path
    return [{"name": _CHECKPOINT_VOLUME, "persistentVolumeClaim": {"claimName": name}}], [mount]


def _tolerates(t: Toleration, key: str) -> bool:
    effect_ok = t.effect is None or t.effect is TaintEffect.NO_SCHEDULE
    if t.key is None:
        return t.operator is TolerationOperator.EXISTS and effect_ok
    return t.key == key and t.operator is TolerationOperator.EXISTS and effect_ok


def _placement(w: WorkloadSpec) -> tuple[str, dict[str, Any]]:
    """The device resource and the pod spec fields that put the pods on the pool's nodes."""
    tpu = w.accelerator.kind is AcceleratorKind.TPU
    resource, taint = (v.RESOURCE_GOOGLE_TPU, v.TAINT_TPU) if tpu else (v.RESOURCE_NVIDIA_GPU, v.TAINT_GPU)
    node_selector = dict(w.pool.node_selector) or {v.LABEL_POOL: label_value(w.pool_name)}
    tolerations = [t.to_wire() for t in w.pool.tolerations]
    if not any(_tolerates(t, taint) for t in w.pool.tolerations):
        tolerations.append({"key": taint, "operator": "Exists", "effect": "NoSchedule"})
    fields: dict[str, Any] = {"nodeSelector": node_selector, "tolerations": tolerations}
    if w.nodes > 1:
        # One pod per node: a gang of whole nodes must never double up on one of them.
        fields["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": selector(w)}, "topologyKey": "kubernetes.io/hostname"}
                ]
            }
        }
    if w.avoid_nodes:
        # After a consolidation move: the nodes cleared for a gang are not refilled by this attempt.
        # A node field selector takes one value per requirement; requirements of one term are ANDed.
        term = {
            "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": [n]} for n in sorted(w.avoid_nodes)]
        }
        fields.setdefault("affinity", {})["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    return resource, fields


def _pod(w: WorkloadSpec) -> dict[str, Any]:
    resource, placement = _placement(w)
    checkpoint_volumes, checkpoint_mounts = _checkpoint_volume(w)
    devices = {resource: str(w.devices_per_pod)}
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": w.spec.image,
        "env": _env(w),
        "resources": {"requests": devices, "limits": dict(devices)},
        "ports": [{"name": v.RENDEZVOUS_PORT_NAME, "containerPort": v.RENDEZVOUS_PORT, "protocol": "TCP"}],
        "volumeMounts": [
            {"name": _ANNOTATIONS_VOLUME, "mountPath": v.POD_ANNOTATIONS_DIR, "readOnly": True},
            *checkpoint_mounts,
        ],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if w.spec.command:
        container["command"] = list(w.spec.command)
    if w.spec.args:
        container["args"] = list(w.spec.args)
    annotations = {
        "path": v.POD_ANNOTATIONS_FILE.removeprefix(v.POD_ANNOTATIONS_DIR + "/"),
        "fieldRef": {"fieldPath": "metadata.annotations"},
    }
    # A gang's pods resolve as <name>-<index>.<name> (the Indexed Job sets the hostname, the
    # headless Service of that name the subdomain); one pod alone needs no DNS name.
    dns = {"subdomain": w.name} if w.nodes > 1 else {}
    return {
        "restartPolicy": "Never",
        **dns,
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        **placement,
        "containers": [container],
        "volumes": [
            {"name": _ANNOTATIONS_VOLUME, "downwardAPI": {"items": [annotations]}},
            *checkpoint_volumes,
        ],
    }


def _pod_failure_policy() -> dict[str, Any]:
    rules: dict[int, dict[str, Any]] = {
        RULE_DISRUPTION: {
            "action": "FailJob",
            "onPodConditions": [{"type": v.CONDITION_DISRUPTION_TARGET, "status": "True"}],
        },
        RULE_EXIT_CODE: {
            "action": "FailJob",
            "onExitCodes": {"containerName": CONTAINER, "operator": "NotIn", "values": [0]},
        },
    }
    return {"rules": [rules[i] for i in sorted(rules)]}


def build(w: WorkloadSpec) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The ``batch/v1`` Job and the headless ``v1`` Service of one attempt, as wire dicts (no
    Service for a one-node attempt: see the module's docstring)."""
    _check(w)
    name = w.name
    # The label holds the job's name only up to 63 characters (then a hash): the annotation holds
    # it whole, so the operator maps pods and workloads back to their AcceleratorJob exactly.
    notes = {v.ANNOTATION_JOB_NAME: w.job_name}
    job_notes = {**notes, v.ANNOTATION_ADMISSION: views.admission_note(w.admission)} if w.admission else notes
    meta = {
        "name": name,
        "namespace": w.namespace,
        "labels": labels(w),
        "annotations": notes,
        "ownerReferences": [owner_reference(w)],
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {**copy.deepcopy(meta), "annotations": dict(job_notes)},
        "spec": {
            "completionMode": "Indexed",
            "completions": w.nodes,
            "parallelism": w.nodes,
            "backoffLimit": 0,
            "podFailurePolicy": _pod_failure_policy(),
            # The Job controller copies the template's finalizers onto every pod it makes.
            "template": {
                "metadata": {"labels": labels(w), "annotations": dict(notes), "finalizers": [v.FINALIZER_LEDGER]},
                "spec": _pod(w),
            },
        },
    }
    if w.nodes <= 1:
        return job, None
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": copy.deepcopy(meta),
        "spec": {
            "clusterIP": "None",
            "selector": selector(w),
            "publishNotReadyAddresses": True,
            "ports": [
                {
                    "name": v.RENDEZVOUS_PORT_NAME,
                    "port": v.RENDEZVOUS_PORT,
                    "targetPort": v.RENDEZVOUS_PORT,
                    "protocol": "TCP",
                }
            ],
        },
    }
    return job, service


def failed_rule(job: Mapping[str, Any]) -> int | None:
    """The podFailurePolicy rule (``RULE_DISRUPTION`` or ``RULE_EXIT_CODE``) that ended a Job, from
    its ``FailureTarget`` or ``Failed`` condition (reason ``PodFailurePolicy``, message "… matching
    FailJob rule at index N"); None when no rule ended it (running, succeeded, or failed for
    another reason: ``BackoffLimitExceeded`` — a pod failed with no exit code, e.g. never started)."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        ended = cond.get("type") in ("FailureTarget", "Failed") and cond.get("status") == "True"
        if ended and cond.get("reason") == "PodFailurePolicy":
            found = _FAILED_RULE.search(cond.get("message") or "")
            if found:
                return int(found.group(1))
    return None


# --- the port ---------------------------------------------------------------------------------


class WorkloadClient(Protocol):
    def create(self, job: dict[str, Any], service: dict[str, Any] | None) -> bool:
        """Create the Service (if any), then the Job. True if the Job was created now, False if this
        owner's Job already existed (a retried reconcile). Raises ``WorkloadConflict`` if the name
        belongs to another owner."""
        ...

    def delete(self, namespace: str, name: str) -> None:
        """Delete the Job (its pods in the background) and the Service; gone already is fine (a
        one-node attempt never had a Service)."""
        ...

    def delete_pod(self, namespace: str, name: str) -> None:
        """Delete one pod of ours whose batch Job is gone (the sweep); gone already is fine."""
        ...

    def release_pod(self, namespace: str, name: str) -> None:
        """Remove ``vocabulary.FINALIZER_LEDGER`` from one pod of ours (the ledger holds its times);
        gone already, or without it, is fine."""
        ...


def _owner_uid(obj: Mapping[str, Any]) -> str | None:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return next((r.get("uid") for r in refs if r.get("controller")), None)


def _server_message(exc: ApiException) -> str:
    try:
        body = json.loads(exc.body or "")
        message = body.get("message") if isinstance(body, dict) else None
    except ValueError:
        message = None
    # The server's message quotes the values it refused: keep it, bounded.
    return str(message or exc.reason or "")[:_MESSAGE_LENGTH]


def _translate(exc: Exception, what: str) -> Exception:
    """One place: the API server's answers as the port's error vocabulary."""
    if isinstance(exc, ApiException):
        if exc.status in (400, 403, 404, 413, 422):
            return WorkloadRejected(exc.status, _server_message(exc))
        return ClusterUnavailable(f"{what} failed: {exc.status} {exc.reason}")
    return ClusterUnavailable(f"{what} failed: {exc}")


_API_ERRORS: Final = (ApiException, urllib3.exceptions.HTTPError)


class KubeWorkloadClient:
    def __init__(self, api: client.ApiClient | None = None) -> None:
        api = api or api_client()
        self._batch = client.BatchV1Api(api)
        self._core = client.CoreV1Api(api)

    def _create_one(
        self,
        body: dict[str, Any],
        create: Callable[..., Any],
        read: Callable[..., Any],
    ) -> bool:
        meta = body["metadata"]
        what = f"creating {body['kind']} {meta['namespace']}/{meta['name']}"
        try:
            # The answer (the created object) is not read: no deserialising a V1Job per admission.
            create(meta["namespace"], body, _preload_content=False).drain_conn()
        except ApiException as exc:
            if exc.status != 409:
                raise _translate(exc, what) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise _translate(exc, what) from exc
        else:
            return True
        try:
            existing = read(meta["name"], meta["namespace"])
        except _API_ERRORS as exc:
            raise _translate(exc, f"reading {body['kind']} {meta['namespace']}/{meta['name']}") from exc
        refs = existing.metadata.owner_references or []
        if next((r.uid for r in refs if r.controller), None) != _owner_uid(body):
            raise WorkloadConflict(f"{body['kind']} {meta['namespace']}/{meta['name']} exists with another owner")
        return False

    def create(self, job: dict[str, Any], service: dict[str, Any] | None) -> bool:
        # The Service first: the pods' DNS names exist before the first pod asks for them.
        if service is not None:
            self._create_one(service, self._core.create_namespaced_service, self._core.read_namespaced_service)
        return self._create_one(job, self._batch.create_namespaced_job, self._batch.read_namespaced_job)

    def delete(self, namespace: str, name: str) -> None:
        deletes: Iterable[tuple[str, Callable[..., Any]]] = (
            ("Job", self._batch.delete_namespaced_job),
            ("Service", self._core.delete_namespaced_service),
        )
        for kind, delete in deletes:
            _gone_is_fine(
                f"deleting {kind} {namespace}/{name}", delete, name, namespace, propagation_policy="Background"
            )

    def delete_pod(self, namespace: str, name: str) -> None:
        _gone_is_fine(f"deleting Pod {namespace}/{name}", self._core.delete_namespaced_pod, name, namespace)

    def release_pod(self, namespace: str, name: str) -> None:
        # A strategic merge patch: only this finalizer goes, whatever others the pod carries
        # (the Job controller's own), with no read first and no conflict on a concurrent change.
        body = {"metadata": {"$deleteFromPrimitiveList/finalizers": [v.FINALIZER_LEDGER]}}
        patch = self._core.patch_namespaced_pod
        resp = _gone_is_fine(f"releasing Pod {namespace}/{name}", patch, name, namespace, body, _preload_content=False)
        if resp is not None:
            resp.drain_conn()


def _gone_is_fine(what: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``call``'s answer; None when its object is gone already (404); other errors in the port's
    vocabulary (``_translate``)."""
    try:
        return call(*args, **kwargs)
    except ApiException as exc:
        if exc.status != 404:
            raise _translate(exc, what) from exc
    except urllib3.exceptions.HTTPError as exc:
        raise _translate(exc, what) from exc
    return None


@dataclass
class FakeWorkloadClient:
    """In memory: keeps created objects by (namespace, name), records every call, and raises
    ``fail_next`` (once) on the next call when set."""

    jobs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    services: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # (verb, namespace, name)
    fail_next: Exception | None = None

    def _maybe_fail(self) -> None:
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc

    def create(self, job: dict[str, Any], service: dict[str, Any] | None) -> bool:
        key = (job["metadata"]["namespace"], job["metadata"]["name"])
        self.calls.append(("create", *key))
        self._maybe_fail()
        for store, body in ((self.services, service), (self.jobs, job)):
            existing = store.get(key)
            if body is not None and existing is not None and _owner_uid(existing) != _owner_uid(body):
                raise WorkloadConflict(f"{body['kind']} {key[0]}/{key[1]} exists with another owner")
        if service is not None:
            self.services.setdefault(key, copy.deepcopy(service))
        if key in self.jobs:
            return False
        self.jobs[key] = copy.deepcopy(job)
        return True

    def delete(self, namespace: str, name: str) -> None:
        self.calls.append(("delete", namespace, name))
        self._maybe_fail()
        self.jobs.pop((namespace, name), None)
        self.services.pop((namespace, name), None)

    def delete_pod(self, namespace: str, name: str) -> None:
        self.calls.append(("delete_pod", namespace, name))
        self._maybe_fail()

    def release_pod(self, namespace: str, name: str) -> None:
        self.calls.append(("release_pod", namespace, name))
        self._maybe_fail()

    def reset(self) -> None:
        self.jobs.clear()
        self.services.clear()
        self.calls.clear()
        self.fail_next = None


_: WorkloadClient = FakeWorkloadClient()
