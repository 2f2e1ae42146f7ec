"""Soak benchmark: many short jobs on the local control plane while the operator, its Lease and the
API server are made to fail, and spot nodes are taken away; then every job's ledger is checked
against what its pods' own timestamps say.

What it does, in order:

1. Starts the local control plane (or reuses a healthy one), applies the CRDs, makes two team
   namespaces (labelled with their team), an AcceleratorPolicy with a budget per team (so each
   team's spending is kept in its status), an on-demand and a spot pool of KWOK nodes (8 × H100
   each).
2. Runs the operator as subprocesses (``python -m accel_operator``), with leader election by a
   Lease: one replica, two at times.
3. Creates ``--jobs`` AcceleratorJobs spread over the first part of the chaos window: 1, 2, 4, 8
   or 16 devices (16 is a gang of two pods), on demand or spot (``require``), each with a run
   length; some fail once with exit code 1 (``maxRetries: 1``) and run again.
4. Ends pods as a program would: when an attempt's first pod has run its length (from its
   ``status.startTime``), its pods are given the KWOK exit-code annotation and KWOK ends them
   (``finishedAt``).
5. A chaos loop, one fault every ``--gap`` seconds in a shuffled order: SIGKILL of the leader
   (``--kills``; sometimes with a second replica already running, which takes over by the
   Lease; else a new one starts after a short pause), SIGSTOP of the leader for longer than its
   Lease with a standby running, then SIGCONT (``--stops``), an API server restart
   (``--apiserver-restarts``) and a spot disruption of a node running pods, AWS or GKE style,
   the node coming back a few seconds later (``--spot``).
6. Waits until every job has ended (at most ``--settle`` s after the last fault: a job not ended
   by then is *stuck*), then for the ledgers and the teams' spending to stop moving.

Truth comes from the pods, watched by this process (which is never killed): an attempt holds its
devices from its first pod's ``status.startTime`` to its last pod's end — its container's
``finishedAt``, or, for a pod deleted before it finished (a spot node taken away), the time the
delete was asked for (``deletionTimestamp`` minus ``deletionGracePeriodSeconds``). That is the
ledger's definition (docs/cost.md, "When an attempt is charged"); the per-pod sum (each pod's own
devices × its own lifetime) is printed beside it.

It prints (and writes as JSON with ``--out``): jobs ended, lost (gone or failed though nothing made
it fail for good), stuck, batch Jobs per attempt (extra: more than one for one attempt), attempts
against preemptions and retries, per job |ledger − truth| in device-seconds (max, p99, and jobs over
1 device-second per attempt), and each team's spending against the sum of its jobs, to the cent.
Floors: 0 lost, 0 stuck, 0 extra batch Jobs, ledger within 1 device-second per attempt of the
truth, team totals exact.

Run (CI size, a few minutes):
    python bench/soak.py --quick --out soak.json
Run (full: 2,000 jobs, 100 kills, 10 SIGSTOPs, 3 API server restarts; about an hour):
    python bench/soak.py --out soak.json
Export ``ACCEL_CLUSTER_PORT_BASE`` (and ``ACCEL_CLUSTER_HOME``) to run on another control plane.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client

from accel_api import registry
from accel_api import vocabulary as v
from accel_api.pool import AcceleratorPoolSpec
from accel_localcluster import demo_pools, kubeapi, nodes, preempt

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import kwok_world  # noqa: E402
from bench.kwok_world import JOB_SPEC, NamespaceWatch, pct  # noqa: E402

SIZES = (1, 1, 2, 2, 4, 4, 8, 8, 16)  # devices; 16 is a gang of two 8-device pods
LEASE = "accel-soak"


# --- the plan of the run ----------------------------------------------------------------------


@dataclass(frozen=True)
class JobPlan:
    namespace: str
    name: str
    team: str
    devices: int
    pool: str
    spot: bool
    run_seconds: float
    fail_first: bool  # its first attempt exits 1 (a retry follows)


def plan_jobs(
    rng: random.Random, args: argparse.Namespace, teams: dict[str, str], pools: dict[str, str]
) -> list[JobPlan]:
    out = []
    spaces = sorted(teams)
    for i in range(args.jobs):
        ns = spaces[i % len(spaces)]
        spot = rng.random() < args.spot_share
        out.append(
            JobPlan(
                namespace=ns,
                name=f"s-{i:05d}",
                team=teams[ns],
                devices=rng.choice(SIZES),
                pool=pools["spot" if spot else "od"],
                spot=spot,
                run_seconds=rng.uniform(args.run_min, args.run_max),
                fail_first=rng.random() < args.fail_share,
            )
        )
    return out


def job_doc(plan: JobPlan) -> dict[str, Any]:
    spec: dict[str, Any] = {
        **JOB_SPEC,
        "team": plan.team,
        "placement": {"pools": [plan.pool], "minDevices": plan.devices, "maxDevices": plan.devices},
        "maxRetries": 1 if plan.fail_first else 0,
        "spot": {"policy": "require", "maxPreemptions": 50} if plan.spot else {"policy": "never"},
    }
    if plan.spot:  # a spot job must say where it checkpoints; nothing is written there (from scratch)
        spec["checkpoint"] = {"uri": f"pvc://ckpt/{plan.name}", "intervalMinutes": 10}
    return {
        "apiVersion": v.API_VERSION,
        "kind": "AcceleratorJob",
        "metadata": {"name": plan.name, "namespace": plan.namespace},
        "spec": spec,
    }


# --- truth: the pods, and the batch Jobs per attempt --------------------------------------------


def _utc(t: dt.datetime | None) -> dt.datetime | None:
    return t.astimezone(dt.UTC) if t is not None else None


@dataclass
class PodTruth:
    key: tuple[str, str, int]  # (namespace, job, attempt)
    devices: int
    start: dt.datetime | None = None  # status.startTime
    end: dt.datetime | None = None  # the container's finishedAt, or when its deletion was asked for
    phase: str = "Pending"
    deleted: bool = False
    annotated: bool = False  # this bench asked KWOK to end it


def _pod_devices(pod: Any) -> int:
    total = 0
    for c in pod.spec.containers or []:
        req = {**((c.resources and c.resources.limits) or {}), **((c.resources and c.resources.requests) or {})}
        total += int(req.get("nvidia.com/gpu", 0) or 0)
    return total


class PodWatch(NamespaceWatch):
    """Every pod of the run's jobs, by uid, with the times it carries."""

    def __init__(self, core: client.CoreV1Api, namespace: str, pods: dict[str, PodTruth], lock: threading.Lock) -> None:
        super().__init__(core.list_namespaced_pod, namespace, thread=f"pods-{namespace}", label_selector=v.LABEL_JOB)
        self.pods, self.lock = pods, lock

    def record(self, obj: Any, now: float, event: str) -> None:
        labels = obj.metadata.labels or {}
        attempt = labels.get(v.LABEL_ATTEMPT, "")
        if not attempt.isdigit():
            return
        uid = obj.metadata.uid
        with self.lock:
            p = self.pods.get(uid)
            if p is None:
                p = self.pods[uid] = PodTruth(
                    (obj.metadata.namespace, labels[v.LABEL_JOB], int(attempt)), _pod_devices(obj)
                )
            st = obj.status
            if st is not None:
                p.phase = st.phase or p.phase
                p.start = p.start or _utc(st.start_time)
                for cs in st.container_statuses or []:
                    term = cs.state and cs.state.terminated
                    if term is not None and term.finished_at is not None:
                        p.end = max(filter(None, (p.end, _utc(term.finished_at))))
            meta = obj.metadata
            deleting = _utc(meta.deletion_timestamp)
            if deleting is not None and p.end is None:
                asked = deleting - dt.timedelta(seconds=meta.deletion_grace_period_seconds or 0)
                p.end = asked if p.start is None or asked >= p.start else p.start
            if event == "DELETED":
                p.deleted = True
                if p.end is None and p.start is not None:
                    p.end = dt.datetime.now(dt.UTC)  # deleted without a trace: when it was seen gone


class BatchJobWatch(NamespaceWatch):
    """The distinct batch Jobs seen for each (namespace, job, attempt)."""

    def __init__(self, batch: client.BatchV1Api, namespace: str, seen: dict[tuple[str, str, int], set[str]]) -> None:
        super().__init__(batch.list_namespaced_job, namespace, thread=f"jobs-{namespace}", label_selector=v.LABEL_JOB)
        self.seen = seen

    def record(self, obj: Any, now: float, event: str) -> None:
        labels = obj.metadata.labels or {}
        attempt = labels.get(v.LABEL_ATTEMPT, "")
        if attempt.isdigit():
            self.seen.setdefault((obj.metadata.namespace, labels[v.LABEL_JOB], int(attempt)), set()).add(
                obj.metadata.uid
            )


class Ender(threading.Thread):
    """Ends each attempt's pods once its first pod has run the job's length: exit code 1 for the
    first attempt of a job planned to fail once, else 0."""

    def __init__(
        self,
        core: client.CoreV1Api,
        plans: dict[tuple[str, str], JobPlan],
        pods: dict[str, PodTruth],
        lock: threading.Lock,
        names: dict[str, str],
    ) -> None:
        super().__init__(name="ender", daemon=True)
        self.core, self.plans, self.pods, self.lock, self.names = core, plans, pods, lock, names
        self.stop = threading.Event()
        self.errors = 0

    def run(self) -> None:
        while not self.stop.wait(0.5):
            now = dt.datetime.now(dt.UTC)
            with self.lock:
                by_attempt: dict[tuple[str, str, int], list[tuple[str, PodTruth]]] = {}
                for uid, p in self.pods.items():
                    by_attempt.setdefault(p.key, []).append((uid, p))
                due = []
                for key, group in by_attempt.items():
                    plan = self.plans.get(key[:2])
                    starts = [p.start for _, p in group if p.start is not None]
                    if plan is None or not starts:
                        continue
                    if (now - min(starts)).total_seconds() < plan.run_seconds:
                        continue
                    code = 1 if plan.fail_first and key[2] == 0 else 0
                    for uid, p in group:
                        if p.phase == "Running" and not p.annotated and not p.deleted:
                            due.append((uid, p, code))
            for uid, p, code in due:
                try:
                    self.core.patch_namespaced_pod(
                        self.names[uid],
                        p.key[0],
                        {"metadata": {"annotations": {v.ANNOTATION_SIM_EXIT_CODE: str(code)}}},
                    )
                    p.annotated = True
                except (client.ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
                    if isinstance(exc, client.ApiException) and exc.status == 404:
                        p.annotated = True
                    else:
                        self.errors += 1  # the API server may be restarting: tried again


class NameIndex(PodWatch):
    """The pod watch that also keeps each pod's name by uid (the ender patches by name)."""

    def __init__(self, *a: Any, names: dict[str, str], **k: Any) -> None:
        super().__init__(*a, **k)
        self.names = names

    def record(self, obj: Any, now: float, event: str) -> None:
        self.names[obj.metadata.uid] = obj.metadata.name
        super().record(obj, now, event)


# --- the operator's replicas and the chaos ----------------------------------------------------


class Fleet:
    """The operator's replicas (subprocesses), elected by a Lease."""

    def __init__(
        self, kubeconfig: Path, env: dict[str, str], logdir: Path, coord: client.CoordinationV1Api, lease_namespace: str
    ) -> None:
        self.kubeconfig, self.env, self.logdir = kubeconfig, env, logdir
        self.coord, self.lease_namespace = coord, lease_namespace
        self.procs: list[subprocess.Popen[bytes]] = []
        self.started = 0

    def start(self) -> subprocess.Popen[bytes]:
        self.started += 1
        log = (self.logdir / f"operator-{self.started:03d}.log").open("wb")
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1", **self.env}
        proc = subprocess.Popen([sys.executable, "-m", "accel_operator"], env=env, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def alive(self) -> list[subprocess.Popen[bytes]]:
        self.procs = [p for p in self.procs if p.poll() is None]
        return self.procs

    def leader(self, timeout: float = 60.0) -> subprocess.Popen[bytes] | None:
        """The replica that holds the Lease (its identity names its pid), once one does."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                lease = self.coord.read_namespaced_lease(LEASE, self.lease_namespace)
                holder = (lease.spec and lease.spec.holder_identity) or ""
            except (client.ApiException, urllib3.exceptions.HTTPError, OSError):
                holder = ""
            for p in self.alive():
                if f"-{p.pid}-" in holder:
                    return p
            time.sleep(0.5)
        return None

    def ensure(self, count: int) -> None:
        while len(self.alive()) < count:
            self.start()

    def stop_all(self) -> None:
        for p in self.procs:
            with suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGCONT)
                p.terminate()
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)


@dataclass
class Chaos:
    fleet: Fleet
    core: client.CoreV1Api
    cluster: Any
    spot_pool: str
    spot_manifests: dict[str, dict[str, Any]]
    spot_spec: AcceleratorPoolSpec
    pods: dict[str, PodTruth]
    lock: threading.Lock
    lease_seconds: float
    rng: random.Random
    done: dict[str, int] = field(default_factory=dict)
    replaced: int = 0
    log: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {text}"
        self.log.append(line)
        print(f"  chaos: {line}", flush=True)

    def kill(self) -> None:
        two = self.rng.random() < 0.4
        if two:
            self.fleet.ensure(2)
        leader = self.fleet.leader()
        if leader is None:
            self.note("kill: no leader found")
            return
        os.kill(leader.pid, signal.SIGKILL)
        leader.wait(10)
        self.note(f"SIGKILL leader {leader.pid} ({'a standby takes over' if two else 'restarted'})")
        if not two:
            time.sleep(self.rng.uniform(0.5, 3.0))
        self.fleet.ensure(1)
        self.done["kills"] = self.done.get("kills", 0) + 1

    def stop(self) -> None:
        self.fleet.ensure(2)
        leader = self.fleet.leader()
        if leader is None:
            self.note("stop: no leader found")
            return
        os.kill(leader.pid, signal.SIGSTOP)
        pause = self.lease_seconds + 4.0
        self.note(f"SIGSTOP leader {leader.pid} for {pause:.0f}s")
        time.sleep(pause)
        os.kill(leader.pid, signal.SIGCONT)
        self.done["stops"] = self.done.get("stops", 0) + 1

    def apiserver(self) -> None:
        t = time.monotonic()
        self.cluster.restart_apiserver(down_seconds=self.rng.uniform(0.5, 2.0))
        self.note(f"API server restarted ({time.monotonic() - t:.1f}s)")
        self.done["apiserver_restarts"] = self.done.get("apiserver_restarts", 0) + 1

    def spot(self) -> None:
        busy: list[str] = []
        for _ in range(10):  # a moment when some spot node runs pods (most moments)
            busy = self._nodes_running()
            if busy:
                break
            time.sleep(2.0)
        if not busy:
            self.note("spot: no spot node ran pods for 20 s")
            return
        node = self.rng.choice(busy)
        if self.rng.random() < 0.5:
            # Drained, then terminated, as Karpenter does: the evicted pods end (KWOK deletes them,
            # as a kubelet would end them within their grace) before the node goes. Deleted at
            # once, a KWOK node's evicted pods would wait for the pod garbage collector (a minute).
            preempt.aws_spot_interruption(self.core, node, handler="karpenter", remove_node=False)
            self._drained(node)
            preempt.delete_node(self.core, node)
            how = "aws"
        else:
            preempt.gke_preemption(self.core, node)
            how = "gke"
        self.note(f"spot disruption ({how}) of {node}")
        self.done["spot"] = self.done.get("spot", 0) + 1
        threading.Timer(5.0, self._replace, args=(node,)).start()

    def _drained(self, node: str, timeout: float = 15.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            pods = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
            if not any(p.status.phase in ("Pending", "Running") for p in pods):
                return
            time.sleep(0.5)

    def _nodes_running(self) -> list[str]:
        out = []
        for n in self.core.list_node(label_selector=f"{v.LABEL_POOL}={self.spot_pool}").items:
            pods = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={n.metadata.name}").items
            if any(p.status.phase == "Running" for p in pods):
                out.append(n.metadata.name)
        return out

    def _replace(self, node: str) -> None:
        """A new instance in the reclaimed one's place, under a new name (as a cloud's is: the pods
        the old node held are the pod garbage collector's to delete)."""
        self.replaced += 1
        index = len(self.spot_manifests) + self.replaced - 1
        manifest = nodes.node_manifests(self.spot_pool, self.spot_spec, 1, start=index)[0]
        try:
            _retrying(nodes.ensure_nodes, self.core, [manifest])
        except (client.ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            self.note(f"spot: the replacement of {node} could not be made: {exc}")


def faults(args: argparse.Namespace, rng: random.Random) -> list[str]:
    out = ["kill"] * args.kills + ["stop"] * args.stops + ["apiserver"] * args.apiserver_restarts + ["spot"] * args.spot
    rng.shuffle(out)
    return out


# --- the figures ------------------------------------------------------------------------------


def _t(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _closed(job: dict[str, Any], ran: set[tuple[str, str, int]]) -> bool:
    """An ended job whose ledger has closed every attempt a pod of which ran (a running job, or
    one whose last attempt never started a pod, has nothing more to wait for here)."""
    st = job.get("status") or {}
    if st.get("phase") not in ("Succeeded", "Failed"):
        return True
    meta = job.get("metadata") or {}
    attempts = {a.get("attempt"): a for a in (st.get("cost") or {}).get("attempts") or []}
    for attempt in range(int(st.get("attempt") or 0) + 1):
        if (meta.get("namespace"), meta.get("name"), attempt) in ran:
            entry = attempts.get(attempt)
            if entry is None and (st.get("cost") or {}).get("folded"):
                continue  # folded with the oldest attempts
            if entry is None or not entry.get("end"):
                return False
    return True


def ledger_seconds(cost: dict[str, Any]) -> dict[int, float]:
    """Device-seconds per attempt in a job's ``status.cost``."""
    out: dict[int, float] = {}
    for a in cost.get("attempts") or []:
        secs = sum((_t(i["end"]) - _t(i["start"])).total_seconds() for i in a.get("intervals") or [])
        out[a["attempt"]] = out.get(a["attempt"], 0.0) + a["devices"] * secs
    return out


def truth_seconds(pods: list[PodTruth]) -> tuple[dict[int, float], dict[int, float], int]:
    """(per attempt: devices × first start → last end; per attempt: the per-pod sum; pods started
    and not ended)."""
    span: dict[int, float] = {}
    per_pod: dict[int, float] = {}
    open_pods = 0
    by: dict[int, list[PodTruth]] = {}
    for p in pods:
        by.setdefault(p.key[2], []).append(p)
    for attempt, group in by.items():
        started = [p for p in group if p.start is not None]
        if not started:
            continue
        open_pods += sum(1 for p in started if p.end is None)
        ends = [p.end for p in started if p.end is not None]
        if not ends:
            continue
        first = min(p.start for p in started if p.start is not None)
        span[attempt] = sum(p.devices for p in group) * max(0.0, (max(ends) - first).total_seconds())
        per_pod[attempt] = sum(
            p.devices * max(0.0, (p.end - p.start).total_seconds()) for p in started if p.end is not None and p.start
        )
    return span, per_pod, open_pods


def figures(
    plans: list[JobPlan],
    jobs: dict[tuple[str, str], dict[str, Any]],
    pods: list[PodTruth],
    batch: dict[tuple[str, str, int], set[str]],
    spend: dict[str, float],
    *,
    ended_in_time: set[tuple[str, str]],
) -> dict[str, Any]:
    """The figures of a run; ``ended_in_time``: the jobs seen ended by the stuck deadline."""
    by_job: dict[tuple[str, str], list[PodTruth]] = {}
    for p in pods:
        by_job.setdefault(p.key[:2], []).append(p)
    ended = lost = stuck = 0
    stuck_names: list[str] = []
    diffs: list[float] = []
    pod_diffs: list[float] = []
    over: list[dict[str, Any]] = []
    open_pods = 0
    attempts = preemptions = retries = 0
    team_sum: dict[str, float] = {}
    for plan in plans:
        key = (plan.namespace, plan.name)
        obj = jobs.get(key)
        if obj is None:
            lost += 1
            continue
        st = obj.get("status") or {}
        phase = st.get("phase")
        if phase in ("Succeeded", "Failed"):
            ended += 1
            if phase == "Failed":
                lost += 1
        if key not in ended_in_time:
            stuck += 1
            stuck_names.append(f"{plan.namespace}/{plan.name} ({phase} now, attempt {st.get('attempt')})")
        attempts += int(st.get("attempt") or 0) + 1
        preemptions += int(st.get("preemptions") or 0)
        retries += int(st.get("retries") or 0)
        cost = st.get("cost") or {}
        team_sum[plan.team] = team_sum.get(plan.team, 0.0) + float(cost.get("spentUsd") or 0.0)
        led = ledger_seconds(cost)
        span, per_pod, n_open = truth_seconds(by_job.get(key, []))
        open_pods += n_open
        counted = max(1, len(set(led) | set(span)))
        diff = abs(sum(led.values()) - sum(span.values()))
        diffs.append(diff)
        pod_diffs.append(abs(sum(led.values()) - sum(per_pod.values())))
        if diff > counted:
            over.append(
                {
                    "job": f"{plan.namespace}/{plan.name}",
                    "devices": plan.devices,
                    "ledger": {a: round(s, 2) for a, s in sorted(led.items())},
                    "truth": {a: round(s, 2) for a, s in sorted(span.items())},
                    "intervals": [
                        (a["attempt"], i["start"], i["end"]) for a in cost.get("attempts") or [] for i in a["intervals"]
                    ],
                    "pods": sorted(
                        (p.key[2], str(p.start), str(p.end), p.phase, p.deleted) for p in by_job.get(key, [])
                    ),
                }
            )
    extra = sum(len(uids) - 1 for uids in batch.values() if len(uids) > 1)
    teams = {
        t: {
            "policy_usd": round(spend.get(t, math.nan), 2),
            "jobs_usd": round(s, 2),
            "exact": round(spend.get(t, math.nan), 2) == round(s, 2),
        }
        for t, s in sorted(team_sum.items())
    }
    return {
        "jobs": len(plans),
        "ended": ended,
        "lost": lost,
        "stuck": stuck,
        "batch_jobs": sum(len(u) for u in batch.values()),
        "attempts_with_batch_jobs": len(batch),
        "extra_batch_jobs": extra,
        "attempts": attempts,
        "preemptions": preemptions,
        "retries": retries,
        "pods_started_not_ended": open_pods,
        "ledger_truth_max_device_s": round(max(diffs, default=0.0), 3),
        "ledger_truth_p99_device_s": round(pct(diffs, 99), 3) if diffs else 0.0,
        "ledger_truth_per_pod_max_device_s": round(max(pod_diffs, default=0.0), 3),
        "jobs_over_1_device_s_per_attempt": len(over),
        "over_examples": over[:10],
        "stuck_jobs": stuck_names[:10],
        "teams": teams,
        "teams_exact": all(t["exact"] for t in teams.values()),
    }


def table(out: dict[str, Any]) -> str:
    f = out["figures"]
    rows = [
        ("jobs ended / created", f"{f['ended']} / {f['jobs']}"),
        ("lost (gone, or failed for good)", f"{f['lost']}"),
        ("stuck (not ended {:.0f} s after the last fault)".format(out["settle_s"]), f"{f['stuck']}"),
        ("faults done", ", ".join(f"{k} {n}" for k, n in sorted(out["faults_done"].items()))),
        ("batch Jobs / attempts that had one", f"{f['batch_jobs']} / {f['attempts_with_batch_jobs']}"),
        ("extra batch Jobs (more than one for an attempt)", f"{f['extra_batch_jobs']}"),
        ("attempts / preemptions / retries", f"{f['attempts']} / {f['preemptions']} / {f['retries']}"),
        ("pods started and never ended", f"{f['pods_started_not_ended']}"),
        (
            "|ledger − truth| per job: max / p99",
            f"{f['ledger_truth_max_device_s']} / {f['ledger_truth_p99_device_s']} device-s",
        ),
        ("|ledger − per-pod sum| per job: max", f"{f['ledger_truth_per_pod_max_device_s']} device-s"),
        ("jobs over 1 device-second per attempt", f"{f['jobs_over_1_device_s_per_attempt']}"),
    ]
    for team, t in f["teams"].items():
        rows.append((f"team {team}: policy / sum of its jobs", f"{t['policy_usd']:.2f} / {t['jobs_usd']:.2f} USD"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {val}" for k, val in rows)


def floors(out: dict[str, Any]) -> list[str]:
    """The floors the run missed (empty: all held)."""
    f = out["figures"]
    missed = []
    for key in (
        "not_created",
        "lost",
        "stuck",
        "extra_batch_jobs",
        "jobs_over_1_device_s_per_attempt",
        "pods_started_not_ended",
    ):
        if f[key]:
            missed.append(f"{key}: {f[key]}")
    if not f["teams_exact"]:
        missed.append(f"team totals: {f['teams']}")
    return missed


# --- the run ----------------------------------------------------------------------------------


def _policy(name: str, teams: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": v.API_VERSION,
        "kind": "AcceleratorPolicy",
        "metadata": {"name": name},
        "spec": {"budgets": [{"team": t, "period": "monthly", "limitUsd": 1_000_000} for t in teams]},
    }


def _read_all(custom: client.CustomObjectsApi, namespaces: list[str]) -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for ns in namespaces:
        for obj in custom.list_namespaced_custom_object(v.GROUP, v.VERSION, ns, registry.JOB.plural)["items"]:
            out[(ns, obj["metadata"]["name"])] = obj
    return out


def _spend(custom: client.CustomObjectsApi, policy: str) -> dict[str, float]:
    obj = custom.get_cluster_custom_object(v.GROUP, v.VERSION, registry.POLICY.plural, policy)
    return {s["team"]: float(s["spentUsd"]) for s in (obj.get("status") or {}).get("spend") or []}


def _retrying(fn: Any, *a: Any, tries: int = 30, **k: Any) -> Any:
    """``fn`` tried again while the API server is away (it restarts during the run)."""
    for i in range(tries):
        try:
            return fn(*a, **k)
        except (urllib3.exceptions.HTTPError, OSError):
            if i == tries - 1:
                raise
        except client.ApiException as exc:
            if exc.status not in (429, 500, 503, 504) or i == tries - 1:
                raise
        time.sleep(1.0)
    return None


def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    world = kwok_world.start()
    api, core, custom = world.api, world.core, client.CustomObjectsApi(world.api)
    run_id = uuid.uuid4().hex[:4]
    teams = {f"soak-{run_id}-a": f"soak-{run_id}-red", f"soak-{run_id}-b": f"soak-{run_id}-blue"}
    for ns, team in teams.items():
        kubeapi.ensure_namespace(api, ns, {v.LABEL_NAMESPACE_TEAM: team})
        kubeapi.ensure_claim(api, ns, "ckpt")  # the spot jobs' pvc:// checkpoints: mounted by their pods
    namespaces = sorted(teams)
    policy = f"soak-{run_id}"
    kubeapi.apply(api, _policy(policy, sorted(teams.values())))
    pools = {"od": f"soak{run_id}-od", "spot": f"soak{run_id}-spot"}
    manifests: dict[str, dict[str, Any]] = {}
    specs: dict[str, AcceleratorPoolSpec] = {}
    for kind, name in pools.items():
        extra: dict[str, Any] = {"capacityType": "spot"} if kind == "spot" else {}
        # The spot pool's reclaimed nodes are replaced by new ones (new names): room for them.
        most = args.nodes_per_pool + (args.spot if kind == "spot" else 0)
        doc = demo_pools.pool_manifest(name, max_nodes=most, **extra)
        kubeapi.apply(api, doc)
        specs[kind] = AcceleratorPoolSpec.model_validate(doc["spec"])
        for m in nodes.node_manifests(name, specs[kind], args.nodes_per_pool):
            manifests[m["metadata"]["name"]] = m
    nodes.ensure_nodes(core, list(manifests.values()))
    kwok_world.wait_ready(core, set(manifests), 120)
    plans = plan_jobs(rng, args, teams, pools)
    by_key = {(p.namespace, p.name): p for p in plans}
    workdir = Path(tempfile.mkdtemp(prefix="soak-"))
    out: dict[str, Any] = {
        "jobs": args.jobs,
        "pools": dict.fromkeys(pools, f"{args.nodes_per_pool} nodes × 8 H100"),
        "faults_planned": {
            "kills": args.kills,
            "stops": args.stops,
            "apiserver_restarts": args.apiserver_restarts,
            "spot": args.spot,
        },
        "settle_s": args.settle,
        "workdir": str(workdir),
    }
    env = {
        "ACCEL_OPERATOR_NAMESPACES": json.dumps(namespaces),
        "ACCEL_OPERATOR_LIVENESS_PORT": "0",
        "ACCEL_OPERATOR_METRICS_PORT": "0",
        "ACCEL_OPERATOR_RESYNC_SECONDS": "3",
        "ACCEL_OPERATOR_BIND_TIMEOUT_SECONDS": str(args.bind_timeout),
        "ACCEL_OPERATOR_COST_INTERVAL_SECONDS": "1",
        "ACCEL_OPERATOR_COST_WRITE_SECONDS": "2",
        "ACCEL_OPERATOR_COST_ROLLUP_NAMESPACE": namespaces[0],
        "ACCEL_OPERATOR_LEASE": LEASE,
        "ACCEL_OPERATOR_LEASE_NAMESPACE": namespaces[0],
        "ACCEL_OPERATOR_LEASE_SECONDS": str(args.lease_seconds),
        "MALLOC_ARENA_MAX": "2",
    }
    fleet = Fleet(world.kubeconfig, env, workdir, client.CoordinationV1Api(api), namespaces[0])
    lock = threading.Lock()
    pods: dict[str, PodTruth] = {}
    names: dict[str, str] = {}
    batch: dict[tuple[str, str, int], set[str]] = {}
    watches: list[NamespaceWatch] = []
    for ns in namespaces:
        watches.append(NameIndex(client.CoreV1Api(world.new_api()), ns, pods, lock, names=names))
        watches.append(BatchJobWatch(client.BatchV1Api(world.new_api()), ns, batch))
    ender = Ender(client.CoreV1Api(world.new_api()), by_key, pods, lock, names)
    chaos = Chaos(
        fleet,
        client.CoreV1Api(world.new_api()),
        world.cluster,
        pools["spot"],
        {n: m for n, m in manifests.items() if pools["spot"] in n},
        specs["spot"],
        pods,
        lock,
        args.lease_seconds,
        rng,
    )
    try:
        for w in watches:
            w.start()
        ender.start()
        fleet.start()
        if fleet.leader(120) is None:
            raise SystemExit(f"no operator replica took the Lease in 120 s; logs in {workdir}")
        todo = faults(args, rng)
        window = max(1.0, len(todo) * args.gap)
        create_until = time.monotonic() + window * args.create_share
        print(
            f"{args.jobs} jobs over {window * args.create_share:.0f}s, {len(todo)} faults every {args.gap:.0f}s",
            flush=True,
        )
        created: set[tuple[str, str]] = set()
        creator = threading.Thread(target=_create_all, args=(world, plans, create_until, out, created), daemon=True)
        creator.start()
        t0 = time.monotonic()
        for i, fault in enumerate(todo):
            delay = t0 + (i + 1) * args.gap - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            try:
                getattr(chaos, fault)()
            except (client.ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
                chaos.note(f"{fault} failed: {type(exc).__name__}: {str(exc)[:160]}")
        creator.join()
        fleet.ensure(1)
        last_fault = time.monotonic()
        print(f"faults done ({chaos.done}); waiting up to {args.settle:.0f}s for every job to end ...", flush=True)
        jobs: dict[tuple[str, str], dict[str, Any]] = {}
        while time.monotonic() - last_fault < args.settle:
            jobs = _retrying(_read_all, custom, namespaces)
            if all((jobs.get(k, {}).get("status") or {}).get("phase") in ("Succeeded", "Failed") for k in created):
                break
            time.sleep(2.0)
        out["ended_after_last_fault_s"] = round(time.monotonic() - last_fault, 1)
        ended_in_time = {k for k, j in jobs.items() if (j.get("status") or {}).get("phase") in ("Succeeded", "Failed")}
        # The ledgers close at the next ticks, the teams' totals follow: wait until they stop moving.
        previous: Any = None
        still = 0
        for _ in range(60):  # unchanged over four reads in a row (12 s): the operator rewrites
            time.sleep(3.0)  # a ledger another write replaced within 5 s (accountant.RESHOW_SECONDS)
            jobs = _retrying(_read_all, custom, namespaces)
            spend = _retrying(_spend, custom, policy)
            now = (sorted((k, (j.get("status") or {}).get("cost", {}).get("spentUsd")) for k, j in jobs.items()), spend)
            still = still + 1 if now == previous else 0
            with lock:
                ran = {p.key for p in pods.values() if p.start is not None}
            if still >= 3 and all(_closed(j, ran) for j in jobs.values()):
                break
            previous = now
        with lock:
            truth = [PodTruth(p.key, p.devices, p.start, p.end, p.phase, p.deleted, p.annotated) for p in pods.values()]
        out["faults_done"] = chaos.done
        out["chaos_log"] = chaos.log
        out["ender_errors"] = ender.errors
        out["figures"] = figures(
            [p for p in plans if (p.namespace, p.name) in created],
            jobs,
            truth,
            batch,
            spend,
            ended_in_time=ended_in_time,
        )
        out["figures"]["not_created"] = len(plans) - len(created)
        out["floors_missed"] = floors(out)
    finally:
        ender.stop.set()
        fleet.stop_all()
        for w in watches:
            w.stop()
        if "figures" in out:
            print()
            print(table(out), flush=True)
        if not args.keep:
            _cleanup(api, core, namespaces, list(pools.values()), policy, stop=world.started)
    return out


def _create_all(
    world: kwok_world.World, plans: list[JobPlan], until: float, out: dict[str, Any], created: set[tuple[str, str]]
) -> None:
    custom = client.CustomObjectsApi(world.new_api())
    t0 = time.monotonic()
    step = max(0.0, until - t0) / max(1, len(plans))
    failed = []
    for i, plan in enumerate(plans):
        delay = t0 + i * step - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        try:
            _retrying(
                custom.create_namespaced_custom_object,
                v.GROUP,
                v.VERSION,
                plan.namespace,
                registry.JOB.plural,
                job_doc(plan),
            )
        except client.ApiException as exc:
            if exc.status != 409:  # 409: a retried create that had gone through
                failed.append(f"{plan.name}: {exc.status} {str(exc.body)[:200]}")
                continue
        created.add((plan.namespace, plan.name))
    out["create_failures"] = failed


def _cleanup(
    api: client.ApiClient, core: client.CoreV1Api, namespaces: list[str], pools: list[str], policy: str, *, stop: bool
) -> None:
    custom = client.CustomObjectsApi(api)
    with kubeapi.ignoring(404):
        custom.delete_cluster_custom_object(v.GROUP, v.VERSION, registry.POLICY.plural, policy)
    for ns in namespaces:
        kubeapi.delete_claim_volumes(api, ns)  # while the cluster still runs
    if stop:  # this run started the cluster: stopping it (etcd wiped) removes the rest
        kwok_world.cleanup(api, core, namespaces[0], pools, stop_cluster=True)
        return
    for ns in namespaces:
        kwok_world.cleanup(api, core, ns, pools, stop_cluster=False)


def quick(args: argparse.Namespace) -> None:
    """The CI size (a few minutes)."""
    args.jobs, args.kills, args.stops, args.apiserver_restarts, args.spot = 48, 8, 1, 1, 3
    args.gap, args.run_min, args.run_max, args.nodes_per_pool = 7.0, 4.0, 12.0, 4


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument(
        "--quick",
        action="store_true",
        help="the CI size: 48 jobs, 8 kills, 1 SIGSTOP, 1 API server restart, 3 spot disruptions (a few minutes)",
    )
    p.add_argument("--jobs", type=int, default=2000, help="AcceleratorJobs (default 2000)")
    p.add_argument("--kills", type=int, default=100, help="SIGKILLs of the leader (default 100)")
    p.add_argument("--stops", type=int, default=10, help="SIGSTOPs of the leader past its Lease (default 10)")
    p.add_argument("--apiserver-restarts", type=int, default=3, help="API server restarts (default 3)")
    p.add_argument("--spot", type=int, default=20, help="spot node disruptions (default 20)")
    p.add_argument("--gap", type=float, default=8.0, help="seconds between faults (default 8)")
    p.add_argument(
        "--create-share",
        type=float,
        default=0.7,
        help="jobs are created over this share of the chaos window (default 0.7)",
    )
    p.add_argument("--run-min", type=float, default=5.0, help="shortest run of an attempt, s (default 5)")
    p.add_argument("--run-max", type=float, default=30.0, help="longest run of an attempt, s (default 30)")
    p.add_argument("--spot-share", type=float, default=0.4, help="share of jobs on the spot pool (default 0.4)")
    p.add_argument("--fail-share", type=float, default=0.1, help="share of jobs whose first attempt fails (0.1)")
    p.add_argument(
        "--nodes-per-pool",
        type=int,
        default=40,
        help="KWOK nodes of 8 H100 per pool (default 40; at 16 the full size was over capacity and jobs queued)",
    )
    p.add_argument("--lease-seconds", type=float, default=5.0, help="the operator's Lease (default 5 s)")
    p.add_argument("--bind-timeout", type=float, default=30.0, help="ACCEL_OPERATOR_BIND_TIMEOUT_SECONDS (30)")
    p.add_argument(
        "--settle",
        type=float,
        default=60.0,
        help="a job not ended this long after the last fault is stuck (default 60 s)",
    )
    p.add_argument("--seed", type=int, default=25)
    p.add_argument("--keep", action="store_true", help="leave the namespaces, pools and nodes (to look at)")
    p.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = p.parse_args(argv)
    if args.quick:
        quick(args)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    out = run(args)
    if args.out:
        args.out.write_text(json.dumps(out, indent=2, default=str) + "\n")
        print(f"\nfigures written to {args.out}")
    missed = out.get("floors_missed")
    if missed:
        print("floors missed:\n  " + "\n  ".join(missed))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
