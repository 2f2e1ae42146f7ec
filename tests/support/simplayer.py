"""A trace of ``accelctl simulate`` played on the local control plane, as the simulator plays it on
its virtual cluster, so the two can be compared (tests/cluster/test_simulate_agreement.py).

The pools become AcceleratorPools with ``maxNodes`` KWOK nodes each (the simulator's cluster holds
them all from the start); each job is created at its submit second (wall clock, from the start of
:meth:`Player.run`) in its team's namespace. The player then does what the simulator does to an
attempt whose pods run, by the same rules (``replay.run_seconds`` and ``replay.saved_seconds``),
counted from the pods' own ``startTime``:

* it ends them with exit code 0 (KWOK's ``accel.dev/simulate-exit-code``) once the attempt has run
  its pool's ``restartSeconds`` (from the second attempt on) plus the plan's ``durationSeconds``
  times the share of the work not yet checkpointed;
* a checkpointed job writes a complete checkpoint (data and marker, in S3) every
  ``intervalMinutes`` of work, named by the share of the work done, as the simulator's is;
* a disruption line of the trace reclaims the attempt's nodes that many seconds after its pods
  started, as Karpenter does a spot interruption (taint, eviction, the node deleted); a
  replacement node joins the pool at once, since the simulator's pool never shrinks.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from accel_api import registry
from accel_api import vocabulary as v
from accel_api.pool import AcceleratorPool
from accel_localcluster import kubeapi, nodes, preempt
from accel_operator.adapters.kube import views
from accel_operator.reconcile.common.actions import workload_name
from accel_operator.simulate.replay import run_seconds, saved_seconds
from accel_operator.simulate.trace import Arrival, Disruption

TERMINAL = ("Succeeded", "Failed", "Unschedulable")


@dataclass
class _Job:
    arrival: Arrival
    namespace: str
    done: float = 0.0  # share of the work checkpointed, as the simulator's JobRecord.done
    seen: set[int] = field(default_factory=set)  # attempts whose pods were seen running


class Player:
    """Plays ``arrivals`` and ``disruptions`` over ``pools`` (documents as the simulator reads
    them); ``namespace_of`` maps a team to its namespace, ``write_checkpoint(uri, step)`` stores
    one complete checkpoint."""

    def __init__(
        self,
        api: client.ApiClient,
        pools: Sequence[AcceleratorPool],
        pool_docs: Sequence[dict[str, Any]],
        arrivals: Sequence[Arrival],
        disruptions: Sequence[Disruption],
        namespace_of: Callable[[str], str],
        write_checkpoint: Callable[[str, int], None],
    ) -> None:
        self.api, self.core = api, client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.batch = client.BatchV1Api(api)
        self.pools = {p.metadata.name: p.spec for p in pools if p.metadata.name}
        self.pool_docs = list(pool_docs)
        self.arrivals = sorted(arrivals, key=lambda a: (a.submit, a.index))
        self.disrupt = {(d.job, d.attempt): d.after for d in disruptions}
        self.jobs = {a.name: _Job(a, namespace_of(a.team)) for a in arrivals}
        self.write_checkpoint = write_checkpoint
        self.events: list[tuple[float, int, str, str, int, int]] = []  # (at, seq, kind, job, attempt, step)
        self.seq = 0
        self.next_node = {name: spec.max_nodes for name, spec in self.pools.items()}
        self.reclaimed: list[tuple[str, float]] = []  # (node, wall time)
        self.lag: list[float] = []  # seconds each action came after its due time

    def setup(self) -> None:
        for doc in self.pool_docs:
            kubeapi.apply(self.api, doc)
        for name, spec in self.pools.items():
            nodes.ensure_nodes(self.core, nodes.node_manifests(name, spec, spec.max_nodes))

    def teardown(self) -> None:
        for name in self.pools:
            for n in self.core.list_node(label_selector=f"{v.LABEL_POOL}={name}").items:
                preempt.delete_node(self.core, n.metadata.name)
            with kubeapi.ignoring(404):
                self.custom.delete_cluster_custom_object(v.GROUP, v.VERSION, registry.POOL.plural, name)

    # --- the run ------------------------------------------------------------------------------

    def run(self, *, timeout: float) -> dict[str, dict[str, Any]]:
        """Play the trace until every job is terminal; each job's final status by name."""
        t0 = time.time() + 1.0
        deadline = t0 + timeout
        pending = list(self.arrivals)
        while True:
            now = time.time()
            if now > deadline:
                raise TimeoutError(f"the trace did not end in {timeout:.0f}s: {self._phases()}")
            while pending and t0 + pending[0].submit <= now:
                self._create(pending.pop(0))
            self._watch_pods()
            while self.events and self.events[0][0] <= time.time():
                at, _seq, kind, name, attempt, step = heapq.heappop(self.events)
                self.lag.append(time.time() - at)
                self._act(kind, name, attempt, step)
            if not pending and not self.events and self._all_terminal():
                return self._statuses()
            wake = self.events[0][0] if self.events else time.time() + 0.25
            time.sleep(max(0.0, min(0.25, wake - time.time())))

    def _create(self, a: Arrival) -> None:
        ns = self.jobs[a.name].namespace
        body = {
            "apiVersion": v.API_VERSION,
            "kind": "AcceleratorJob",
            "metadata": {"name": a.name, "namespace": ns},
            "spec": a.spec.model_dump(mode="json", by_alias=True, exclude_none=True),
        }
        self.custom.create_namespaced_custom_object(v.GROUP, v.VERSION, ns, registry.JOB.plural, body)

    def _watch_pods(self) -> None:
        """Schedule the end (or the disruption) and the checkpoints of each attempt newly running."""
        for ns in sorted({j.namespace for j in self.jobs.values()}):
            starts: dict[tuple[str, int], float] = {}
            for pod in self.core.list_namespaced_pod(ns, label_selector=v.LABEL_JOB).items:
                labels = pod.metadata.labels or {}
                name, attempt = labels.get(v.LABEL_JOB), labels.get(v.LABEL_ATTEMPT, "")
                if name not in self.jobs or not attempt.isdigit() or pod.status.phase != "Running":
                    continue
                if not pod.status.start_time:
                    continue
                key = (name, int(attempt))
                start = pod.status.start_time.timestamp()
                starts[key] = min(starts.get(key, start), start)
            for (name, attempt), start in sorted(starts.items()):
                job = self.jobs[name]
                if attempt not in job.seen and self._schedule(job, attempt, start):
                    job.seen.add(attempt)

    def _admission(self, job: _Job, attempt: int) -> tuple[str, float | None] | None:
        """The pool and planned duration of ``attempt``, from the admission its batch Job records
        (``accel.dev/admission``, written with the Job, before its pods), else from the job's
        status when the status says that attempt. With the operator's admission status held
        (``admitted_status_seconds``), the pods may run before the status has the attempt's
        plan: the status alone then gave no duration (the simulator's floor of 60 s stood in for
        it) or the previous attempt's plan. None: neither says it yet."""
        name = job.arrival.name
        with kubeapi.ignoring(404):
            batch = self.batch.read_namespaced_job(workload_name(name, attempt), job.namespace)
            note = views.admission_of((batch.metadata.annotations or {}).get(v.ANNOTATION_ADMISSION))
            if note is not None and note.attempt == attempt:
                return note.pool, note.duration_seconds
        st = self.custom.get_namespaced_custom_object(v.GROUP, v.VERSION, job.namespace, registry.JOB.plural, name)
        status = st.get("status") or {}
        plan = status.get("plan") or {}
        if status.get("attempt", 0) != attempt or not plan.get("pool"):
            return None
        return str(plan["pool"]), plan.get("durationSeconds")

    def _schedule(self, job: _Job, attempt: int, start: float) -> bool:
        """Schedule what happens to ``attempt``, whose pods started at ``start``; False (nothing
        scheduled, asked again at the next poll) while its admission is not readable yet."""
        a = job.arrival
        found = self._admission(job, attempt)
        if found is None:
            return False
        pool, planned = found
        duration = max(float(planned or 60.0), 1.0)  # the simulator's floor
        restart = self.pools[pool].restart_seconds if attempt > 0 else 0.0
        run = run_seconds(duration, job.done, restart)
        cut = self.disrupt.get((a.name, attempt))
        interval = a.spec.checkpoint.interval_minutes if a.spec.checkpoint is not None else None
        base = job.done
        if cut is not None and cut < run:
            self._push(start + cut, "disrupt", a.name, attempt)
            job.done = min(1.0, base + saved_seconds(cut - restart, interval) / duration)  # as the simulator
            last = cut
        else:
            self._push(start + run, "end", a.name, attempt)
            last = run
        k = 1
        while interval and restart + k * interval * 60.0 <= last:
            share = min(1.0, base + k * interval * 60.0 / duration)
            self._push(start + restart + k * interval * 60.0, "checkpoint", a.name, attempt, round(share * 1_000_000))
            k += 1
        return True

    def _push(self, at: float, kind: str, name: str, attempt: int, step: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.events, (at, self.seq, kind, name, attempt, step))

    def _act(self, kind: str, name: str, attempt: int, step: int) -> None:
        job = self.jobs[name]
        if kind == "checkpoint":
            assert job.arrival.spec.checkpoint is not None
            self.write_checkpoint(job.arrival.spec.checkpoint.uri, step)
            return
        pods = [
            p
            for p in self.core.list_namespaced_pod(job.namespace, label_selector=f"{v.LABEL_JOB}={name}").items
            if (p.metadata.labels or {}).get(v.LABEL_ATTEMPT) == str(attempt) and p.status.phase == "Running"
        ]
        if kind == "end":
            for p in pods:
                self.core.patch_namespaced_pod(
                    p.metadata.name, job.namespace, {"metadata": {"annotations": {v.ANNOTATION_SIM_EXIT_CODE: "0"}}}
                )
            return
        for node in sorted({p.spec.node_name for p in pods if p.spec.node_name}):
            others = [
                p.metadata.name
                for p in self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
                if (p.metadata.labels or {}).get(v.LABEL_JOB) != name and p.status.phase in ("Pending", "Running")
            ]
            # The simulator's disruption ends this attempt's pods only; a reclaim ends the node's.
            assert not others, f"reclaiming {node} for {name} would also end {others[:5]}: give {name} its own node"
            pool = self.core.read_node(node).metadata.labels[v.LABEL_POOL]
            preempt.aws_spot_interruption(self.core, node, handler="karpenter")
            self.reclaimed.append((node, time.time()))
            # The cloud replaces the instance: the simulator's pool keeps its maxNodes nodes.
            index = self.next_node[pool]
            self.next_node[pool] += 1
            nodes.ensure_nodes(self.core, nodes.node_manifests(pool, self.pools[pool], 1, start=index))

    # --- probes -------------------------------------------------------------------------------

    def _statuses(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for ns in sorted({j.namespace for j in self.jobs.values()}):
            listed = self.custom.list_namespaced_custom_object(v.GROUP, v.VERSION, ns, registry.JOB.plural)
            for obj in listed.get("items", []):
                if obj["metadata"]["name"] in self.jobs:
                    out[obj["metadata"]["name"]] = obj.get("status") or {}
        return out

    def _phases(self) -> dict[str, str]:
        return {n: str(st.get("phase")) for n, st in self._statuses().items()}

    def _all_terminal(self) -> bool:
        phases = self._phases()
        return len(phases) == len(self.jobs) and all(p in TERMINAL for p in phases.values())
