"""Early warnings of a node's end, and what the operator does about each one. Pure.

A cloud announces that it will take a node away: AWS puts an EventBridge event on an SQS queue
about two minutes ahead (spot interruption; a rebalance recommendation or a stopping instance
with no deadline), GKE taints the node ``cloud.google.com/impending-node-termination`` about 30
seconds ahead, and a TPU VM outside GKE shows ``PREEMPTED`` in the TPU API once it is gone.

:func:`respond` turns one :class:`NodeWarning` and what the snapshot knows of its node into a
:class:`Response`: taint the node so nothing new lands there, ask every running pod of our jobs
on it to checkpoint now (the ``accel.dev/checkpoint-now`` annotation, which a downward-API volume
projects into the file the job watches), and tell each job why with an event.

Acting twice is harmless: the token of a warning is a function of the notice itself (the event's
instance and time, the node's incarnation), so a re-delivered message asks nothing new of a pod
that already carries it, posts no second event, and finds the taint already there.
"""

from __future__ import annotations

import re
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from accel_api import vocabulary as v
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common.decision import clip as _clip
from accel_operator.reconcile.common.snapshot import JobKey, NodeView, PodView

TOKEN_LENGTH: Final = 128  # the annotation value; a job compares it, nobody parses it
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9._:/@+-]")
POD_NAMES_IN_MESSAGE: Final = 5
REASON_CHECKPOINT_REQUESTED: Final = "CheckpointRequested"
REASON_NODE_PREEMPTED: Final = "NodePreempted"
REASON_EARLY_WARNING: Final = "early-warning"  # the checkpoint requests' metric label


class WarningSource(StrEnum):
    AWS_SPOT_INTERRUPTION = "aws-spot-interruption"  # reclaimed in two minutes
    AWS_REBALANCE = "aws-rebalance-recommendation"  # elevated risk, no deadline
    AWS_STATE_CHANGE = "aws-state-change"  # stopping, stopped, shutting-down, terminated
    GKE_IMPENDING_TERMINATION = "gke-impending-termination"  # about 30 s
    TPU_PREEMPTED = "tpu-preempted"  # after the fact: the TPU VM is gone

    @property
    def announced(self) -> bool:
        """Whether the node still runs: a checkpoint asked for now can still be written."""
        return self is not WarningSource.TPU_PREEMPTED

    @property
    def we_taint(self) -> bool:
        """GKE taints its own node; for the others the operator puts its taint on."""
        return self is not WarningSource.GKE_IMPENDING_TERMINATION


_WHAT: Final = types.MappingProxyType(
    {
        WarningSource.AWS_SPOT_INTERRUPTION: "EC2 spot interruption warning (2 minutes)",
        WarningSource.AWS_REBALANCE: "EC2 rebalance recommendation",
        WarningSource.AWS_STATE_CHANGE: "EC2 instance stopping or terminating",
        WarningSource.GKE_IMPENDING_TERMINATION: "GKE impending node termination (about 30 s)",
        WarningSource.TPU_PREEMPTED: "the TPU API reports the TPU VM PREEMPTED",
    }
)


def token(source: WarningSource, *parts: str) -> str:
    """The request's value: the same notice gives the same token (re-delivery, a restart), a new
    notice a new one. Only safe characters, at most TOKEN_LENGTH."""
    text = "/".join((source.value, *parts))
    return _UNSAFE.sub("_", text)[:TOKEN_LENGTH]


@dataclass(frozen=True, slots=True)
class NodeWarning:
    node: str
    source: WarningSource
    token: str
    detail: str = ""  # for people: the instance id, the TPU node's name


@dataclass(frozen=True, slots=True)
class JobEvent:
    job: JobKey
    type: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Response:
    warning: NodeWarning
    taint: act.TaintNode | None  # keep_existing: the first notice's taint is the record
    events: tuple[JobEvent, ...]  # before the requests: a crash in between repeats an event, never loses one
    requests: tuple[act.RequestCheckpoint, ...]  # one per job, with the pods not asked yet
    summary: str  # one line for the log

    @property
    def jobs(self) -> tuple[JobKey, ...]:
        return tuple(e.job for e in self.events)

    @property
    def pods(self) -> tuple[tuple[str, str], ...]:
        """Every pod asked to checkpoint: (namespace, name)."""
        return tuple(pod for r in self.requests for pod in r.pods)


def _names(pods: Iterable[str]) -> str:
    names = sorted(pods)
    shown = ", ".join(names[:POD_NAMES_IN_MESSAGE])
    return shown + (f" and {len(names) - POD_NAMES_IN_MESSAGE} more" if len(names) > POD_NAMES_IN_MESSAGE else "")


def respond(warning: NodeWarning, node: NodeView | None, pods: Iterable[PodView]) -> Response:
    """What to do about ``warning``, given its node (None: not in the snapshot any more) and the
    pods bound to it."""
    what = _WHAT[warning.source] + (f" for {warning.detail}" if warning.detail else "")
    taint = None
    if warning.source.we_taint and node is not None and v.TAINT_ACCEL_INTERRUPTION not in node.termination_taints:
        taint = act.TaintNode(
            node.name, v.TAINT_ACCEL_INTERRUPTION, warning.source.value, _clip(what), keep_existing=True
        )
    running: dict[JobKey, list[PodView]] = {}
    for pod in pods:
        if pod.job is not None and not pod.ended and pod.node == warning.node:
            running.setdefault(pod.job, []).append(pod)
    events: list[JobEvent] = []
    requests: list[act.RequestCheckpoint] = []
    for job, job_pods in sorted(running.items()):
        if warning.source.announced:
            asks = [p for p in job_pods if p.checkpoint_now != warning.token]
            if not asks:
                continue  # asked already (a re-delivered notice): nothing new to say
            keys = tuple((p.namespace, p.name) for p in asks)
            requests.append(act.RequestCheckpoint(keys, warning.token, REASON_EARLY_WARNING))
            message = (
                f"node {warning.node} will be reclaimed ({what}): asked pod(s) {_names(p.name for p in asks)} "
                f"to checkpoint now"
            )
            events.append(JobEvent(job, "Warning", REASON_CHECKPOINT_REQUESTED, _clip(message)))
        elif taint is not None:  # the first to see it (our taint is its record): one event per job
            message = (
                f"node {warning.node} was preempted ({what}) under pod(s) {_names(p.name for p in job_pods)}: "
                f"the attempt counts as a preemption"
            )
            events.append(JobEvent(job, "Warning", REASON_NODE_PREEMPTED, _clip(message)))
    summary = f"{what} on node {warning.node}: " + (
        f"{'tainted, ' if taint else ''}{sum(len(r.pods) for r in requests)} pod(s) of {len(events)} job(s) "
        "asked to checkpoint now"
        if warning.source.announced
        else f"{'tainted, ' if taint else ''}{len(events)} job(s) preempted"
    )
    return Response(warning, taint, tuple(events), tuple(requests), _clip(summary))


def gke_warnings(nodes: Iterable[NodeView]) -> list[NodeWarning]:
    """Every node that carries GKE's impending-termination taint, once per node incarnation."""
    return [
        NodeWarning(
            n.name,
            WarningSource.GKE_IMPENDING_TERMINATION,
            token(WarningSource.GKE_IMPENDING_TERMINATION, n.name, n.uid),
        )
        for n in nodes
        if v.TAINT_GKE_IMPENDING_TERMINATION in n.termination_taints
    ]


@dataclass(frozen=True, slots=True)
class TpuHost:
    project: str
    zone: str
    name: str  # the TPU node's name in the TPU API


def tpu_host(provider_id: str) -> TpuHost | None:
    """``gce://<project>/<zone>/<name>`` -> its TPU node (a TPU VM joined as a node keeps the
    TPU node's name as its instance name); None for any other provider id."""
    if not provider_id.startswith("gce://"):
        return None
    parts = provider_id.removeprefix("gce://").split("/")
    if len(parts) != 3 or not all(parts) or any(len(p) > 63 for p in parts):
        return None
    return TpuHost(*parts)


def tpu_preempted(nodes: Iterable[NodeView], states: Mapping[TpuHost, str]) -> list[NodeWarning]:
    """The nodes whose TPU VM the TPU API reports PREEMPTED."""
    out = []
    for n in nodes:
        host = tpu_host(n.provider_id)
        if host is not None and states.get(host) == "PREEMPTED":
            out.append(
                NodeWarning(
                    n.name, WarningSource.TPU_PREEMPTED, token(WarningSource.TPU_PREEMPTED, n.name, n.uid), host.name
                )
            )
    return out
