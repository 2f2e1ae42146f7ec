"""Scale benchmark of the operator on the local control plane (KWOK nodes, real API server).

What it does, in order:

1. Starts the local control plane (or reuses a healthy one), applies the CRDs, and creates
   ``--pools`` AcceleratorPools of ``--nodes / --pools`` KWOK nodes each (8 × H100 per node by
   default), in parallel threads; waits until the nodes are Ready.
2. Runs the operator as a subprocess (``python -m accel_operator``, /metrics on, liveness off)
   and samples its RSS from /proc every 0.2 s.
3. Watches the batch Jobs the operator makes (label ``app.kubernetes.io/managed-by``) and records
   when each one's ADDED event arrives here: that is "workload created" for its AcceleratorJob.
4. Burst phase: creates the burst jobs from ``--clients`` threads as fast as they go. Every job
   asks for exactly one H100 and is pinned to one pool (round robin over the burst pools).
5. Waits for the burst's aftermath to end (its pods made, bound and Running, their statuses
   written: the operator and control plane back within 0.2 cores of their idle use; at most
   ``--drain-timeout`` s, 0 skips it), then the fixed-rate phase: offers ``--rate`` jobs/s for
   ``--rate-seconds`` seconds to the rate pools, which are kept empty for it, and takes each job's
   create → workload latency, also per 10 s of creation (a latency that grows from window to
   window is a rate the machine does not sustain).
6. Prints a table of figures and writes them as JSON (``--out``); stops the operator and, if it
   started the control plane, stops it too (``--keep-cluster`` keeps it).

What the figures mean. ``--jobs`` is the total of both phases: ``rate × rate-seconds`` jobs go to
the rate phase and the rest to the burst. Pods never end (KWOK keeps them Running), so capacity
is split: the rate phase gets the fewest whole pools that hold all its jobs, the burst the other
pools. With the defaults (500 nodes × 8 = 4,000 devices in 10 pools, 5,000 jobs, 20/s for 60 s)
the rate phase gets 3 pools (1,200 devices) for 1,200 jobs and the burst 7 pools (2,800 devices)
for 3,800 jobs: 2,800 are admitted and 1,000 wait in the queue (Pending, QueuedBehind), as a real
backlog would. "Burst jobs/s" is admitted jobs over the time from the first create to the last
admitted job's workload; "sustained" is the same over the middle 10 %–90 % of admissions (no ramp
at either end). The rate phase runs with the burst's jobs, pods and queue still there, so its
latencies are those of an operator holding the whole cluster, not of an empty one; with
``--drain-timeout 0`` it starts right after the burst, behind the burst's own backlog.

Stops by itself: every wait has a deadline (``--timeout`` for each phase).

Run (small, ~2 minutes):
    python bench/scale.py --nodes 50 --pools 5 --jobs 500 --rate 20 --rate-seconds 10
Run (full):
    python bench/scale.py --out scale.json
Export ``ACCEL_CLUSTER_PORT_BASE`` to run the control plane on other ports.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client

from accel_api import registry
from accel_api import vocabulary as v

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import kwok_world  # noqa: E402
from bench.kwok_world import cleanup, cpu_seconds, job_doc, make_pools, pct, wait_ready  # noqa: E402

# --- the operator, its RSS and its metrics ----------------------------------------------------


@dataclass
class RssSampler:
    pid: int
    interval: float = 0.2
    samples: list[tuple[float, int]] = field(default_factory=list)  # (monotonic, bytes)
    hwm: int = 0  # VmHWM: the kernel's own peak
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _read(self) -> tuple[int, int] | None:
        try:
            text = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return None
        values = {}
        for line in text.splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) * 1024
        return values.get("VmRSS", 0), values.get("VmHWM", 0)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            got = self._read()
            if got is None:
                return
            self.samples.append((time.monotonic(), got[0]))
            self.hwm = max(self.hwm, got[1])

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="rss", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        got = self._read()
        if got is not None:
            self.hwm = max(self.hwm, got[1])
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    @property
    def peak(self) -> int:
        return max((b for _, b in self.samples), default=0)

    def peak_between(self, t0: float, t1: float) -> int:
        return max((b for t, b in self.samples if t0 <= t <= t1), default=0)


@contextlib.contextmanager
def operator_process(
    kubeconfig: Path,
    metrics_port: int,
    log_path: Path,
    extra_env: dict[str, str],
    profile: Path | None,
    *,
    traced: Path | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "ACCEL_OPERATOR_METRICS_PORT": str(metrics_port),
        "ACCEL_OPERATOR_METRICS_ADDRESS": "127.0.0.1",
        "ACCEL_OPERATOR_LIVENESS_PORT": "0",
        **extra_env,
    }
    with socket.socket() as probe:  # another operator on this port would answer our scrapes
        # As the operator's HTTP server does: a client connection's TIME_WAIT on this port (its
        # number is in the ephemeral range) does not make it "in use", a listener does.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", metrics_port))
        except OSError as exc:
            raise SystemExit(f"metrics port {metrics_port} is in use (another operator?): {exc}") from exc
    with log_path.open("wb") as log:
        prof = ["-m", "cProfile", "-o", str(profile)] if profile is not None else []
        main = [str(ROOT / "bench" / "traced_operator.py"), str(traced)] if traced else ["-m", "accel_operator"]
        cmd = [sys.executable, *prof, *main]
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def cores_used(pids: dict[str, int | None], window: float) -> float:
    """Cores that the processes ``pids`` used together over the next ``window`` seconds."""
    before = {k: cpu_seconds(p) for k, p in pids.items()}
    time.sleep(window)
    used = [cpu_seconds(p) - before[k] for k, p in pids.items()]
    return sum(u for u in used if not math.isnan(u)) / window


def drain(pids: dict[str, int | None], idle: float, timeout: float, window: float = 5.0) -> tuple[float, float]:
    """Wait until the operator and the control plane together use at most ``idle`` + 0.2 cores
    over ``window`` seconds (the burst's pods made, bound and Running, their statuses written):
    (seconds waited, cores in the last window)."""
    t0 = time.monotonic()
    cores = math.inf
    while time.monotonic() - t0 < timeout:
        cores = cores_used(pids, window)
        if cores <= idle + 0.2:
            break
    return time.monotonic() - t0, cores


def api_requests(api: client.ApiClient) -> dict[str, float]:
    """The API server's requests so far, per ``verb resource[/subresource]`` (every client's)."""
    method, url, headers, _body, _post = api.param_serialize("GET", "/metrics", auth_settings=["BearerToken"])
    resp = api.call_api(method, url, header_params=headers)
    resp.read()
    out: dict[str, float] = {}
    for line in resp.data.decode().splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line[: line.rindex("}")]))
        key = f"{labels.get('verb', '?')} {labels.get('resource', '?')}"
        if labels.get("subresource"):
            key += f"/{labels['subresource']}"
        out[key] = out.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def per_job(before: dict[str, float], after: dict[str, float], jobs: int, top: int = 14) -> dict[str, float]:
    """The requests made between ``before`` and ``after`` per job, the largest first (watches and
    reads that are not per job show as small fractions)."""
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    rows = sorted(((v / max(1, jobs), k) for k, v in delta.items() if v > 0), reverse=True)[:top]
    return {k: round(v, 2) for v, k in rows}


def operator_writes(
    req0: dict[str, float], req1: dict[str, float], ops0: dict[str, float], ops1: dict[str, float], jobs: int
) -> dict[str, float]:
    """The operator's API writes per job between two points: its status patches (the API server's
    count: only the operator patches AcceleratorJob status, the scheduler and the cost accountant
    both), its Events (its own count, created and series patches: other components post Events
    too) and the batch Jobs it created (the API server's count), and their total."""

    def delta(before: dict[str, float], after: dict[str, float], key: str) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)

    events = sum(
        delta(ops0, ops1, f'accel_operator_api_writes_total{{write="{w}"}}') for w in ("event", "event_series")
    )
    out = {
        "status patches": delta(req0, req1, "PATCH acceleratorjobs/status") / max(1, jobs),
        "Events": events / max(1, jobs),
        "Job creates": delta(req0, req1, "POST jobs") / max(1, jobs),
        "Events coalesced (not written)": delta(ops0, ops1, "accel_operator_events_coalesced_total") / max(1, jobs),
    }
    out["total"] = out["status patches"] + out["Events"] + out["Job creates"]
    return {k: round(val, 2) for k, val in out.items()}


def writes_by_kind(
    api: client.ApiClient, namespace: str, ops0: dict[str, float], ops1: dict[str, float], jobs: int
) -> dict[str, dict[str, float]]:
    """What the operator's writes per job were for, between two points: the decisions it applied
    by their phase (each a status patch, its actions, or both) and the Events it holds in
    ``namespace`` by reason (a series counts once: its first write)."""
    phases: dict[str, float] = {}
    for key, val in ops1.items():
        if key.startswith("accel_operator_decisions_total{"):
            phase = key.split('phase="', 1)[1].split('"', 1)[0]
            phases[phase] = round((val - ops0.get(key, 0.0)) / max(1, jobs), 2)
    reasons: dict[str, int] = {}
    token = None
    while True:
        resp = client.EventsV1Api(api).list_namespaced_event(
            namespace, limit=2000, _continue=token, _preload_content=False
        )
        page = json.loads(resp.data)
        for e in page["items"]:
            if e.get("reportingController") == f"{v.GROUP}/accel-operator":
                reasons[e.get("reason", "?")] = reasons.get(e.get("reason", "?"), 0) + 1
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            break
    return {
        "decisions applied by phase": phases,
        "Events by reason": {k: round(n / max(1, jobs), 2) for k, n in sorted(reasons.items())},
    }


def operator_events(api: client.ApiClient, namespace: str) -> int:
    """The Events the operator created in ``namespace`` (by their reporting controller): what an
    operator without ``accel_operator_api_writes_total`` wrote (it made no series patches)."""
    token, n = None, 0
    while True:
        resp = client.EventsV1Api(api).list_namespaced_event(
            namespace, limit=2000, _continue=token, _preload_content=False
        )
        page = json.loads(resp.data)
        n += sum(1 for e in page["items"] if e.get("reportingController") == f"{v.GROUP}/accel-operator")
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return n


def _json_bytes(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")).encode()) if value is not None else 0


def stored_sizes(api: client.ApiClient, namespace: str, sample: int = 200) -> dict[str, float]:
    """Mean bytes (compact JSON, as the API server stores and sends them) of up to ``sample``
    admitted AcceleratorJobs (whole object, status, status.plan, status.conditions) and of their
    batch Jobs: every write re-encodes the whole stored object, so its size is part of each
    write's API-server cost."""
    custom, batch = client.CustomObjectsApi(api), client.BatchV1Api(api)
    jobs = custom.list_namespaced_custom_object(v.GROUP, v.VERSION, namespace, registry.JOB.plural, limit=sample * 4)[
        "items"
    ]
    admitted = [j for j in jobs if (j.get("status") or {}).get("workload")][:sample]
    out: dict[str, float] = {}
    if admitted:
        n = len(admitted)
        out["acceleratorjob"] = sum(_json_bytes(j) for j in admitted) / n
        out["acceleratorjob status"] = sum(_json_bytes(j.get("status")) for j in admitted) / n
        out["status.plan"] = sum(_json_bytes(j["status"].get("plan")) for j in admitted) / n
        out["status.conditions"] = sum(_json_bytes(j["status"].get("conditions")) for j in admitted) / n
        out["status.cost"] = sum(_json_bytes(j["status"].get("cost")) for j in admitted) / n
    resp = batch.list_namespaced_job(namespace, limit=sample, _preload_content=False)
    wl = json.loads(resp.data)["items"]
    if wl:
        for w in wl:
            w.get("metadata", {}).pop("managedFields", None)
        out["batch job (without managedFields)"] = sum(_json_bytes(w) for w in wl) / len(wl)
        out["batch job spec.template"] = sum(_json_bytes(w["spec"].get("template")) for w in wl) / len(wl)
    ev = client.EventsV1Api(api).list_namespaced_event(namespace, limit=sample, _preload_content=False)
    events = json.loads(ev.data)["items"]
    if events:
        for e in events:
            e.get("metadata", {}).pop("managedFields", None)
        out["event"] = sum(_json_bytes(e) for e in events) / len(events)
    return {k: round(val) for k, val in out.items()}


def scrape(port: int) -> dict[str, float]:
    """The operator's /metrics as {series: value} (histogram sums and counts included)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        key, _, value = line.rpartition(" ")
        with contextlib.suppress(ValueError):
            out[key] = float(value)
    return out


def wait_metrics(port: int, timeout: float) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if scrape(port):
            return
        time.sleep(0.25)
    raise TimeoutError(f"the operator's /metrics did not answer in {timeout:.0f}s")


# --- watching workloads -----------------------------------------------------------------------


class WorkloadWatch(kwok_world.NamespaceWatch):
    """Records when the first batch Job of each AcceleratorJob (by its job label) is seen."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        selector = f"{v.LABEL_MANAGED_BY}={v.MANAGED_BY_VALUE}"
        batch = client.BatchV1Api(api)
        super().__init__(batch.list_namespaced_job, namespace, thread="watch", bookmarks=True, label_selector=selector)
        self.seen: dict[str, float] = {}  # job name -> monotonic arrival
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)

    def record(self, obj: Any, now: float, event: str) -> None:
        job = (obj.metadata.labels or {}).get(v.LABEL_JOB)
        if job and event == "ADDED":
            with self.lock:
                if job not in self.seen:
                    self.seen[job] = now
                    self.changed.notify_all()

    def wait_count(self, names: set[str], want: int, timeout: float, alive: Callable[[], bool]) -> int:
        end = time.monotonic() + timeout
        with self.lock:
            while True:
                got = sum(1 for n in names if n in self.seen)
                left = end - time.monotonic()
                if got >= want or left <= 0 or not alive():
                    return got
                self.changed.wait(min(left, 1.0))

    def arrival(self, name: str) -> float | None:
        with self.lock:
            return self.seen.get(name)


# --- creating jobs ----------------------------------------------------------------------------


class Creator:
    """Creates AcceleratorJobs from a pool of threads, one API client per thread."""

    def __init__(self, api_factory: Callable[[], client.ApiClient], threads: int) -> None:
        self._factory = api_factory
        self._local = threading.local()
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="create")
        self.sent: dict[str, float] = {}  # job name -> monotonic just before the create call
        self.failed: list[str] = []
        self._lock = threading.Lock()

    def _create(self, doc: dict[str, Any]) -> None:
        if not hasattr(self._local, "custom"):
            self._local.custom = client.CustomObjectsApi(self._factory())
        meta = doc["metadata"]
        t = time.monotonic()
        try:
            self._local.custom.create_namespaced_custom_object(
                v.GROUP, v.VERSION, meta["namespace"], registry.JOB.plural, doc
            )
        except Exception as exc:  # noqa: BLE001 - counted and reported, the run goes on
            with self._lock:
                self.failed.append(f"{meta['name']}: {exc}")
            return
        with self._lock:
            self.sent[meta["name"]] = t

    def submit(self, doc: dict[str, Any]) -> Any:
        return self.pool.submit(self._create, doc)

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def burst(creator: Creator, docs: list[dict[str, Any]]) -> float:
    """Create all ``docs`` as fast as the threads go; return the seconds it took."""
    t0 = time.monotonic()
    for f in [creator.submit(d) for d in docs]:
        f.result(timeout=600)
    return time.monotonic() - t0


def fixed_rate(creator: Creator, docs: list[dict[str, Any]], rate: float) -> float:
    """Offer ``docs`` at ``rate`` per second (an open loop: a slow create never delays the next)."""
    t0 = time.monotonic()
    futures = []
    for i, d in enumerate(docs):
        delay = t0 + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        futures.append(creator.submit(d))
    for f in futures:
        f.result(timeout=600)
    return time.monotonic() - t0


# --- figures ----------------------------------------------------------------------------------


def latencies(names: list[str], creator: Creator, seen: WorkloadWatch) -> list[float]:
    out = []
    for n in names:
        t0, t1 = creator.sent.get(n), seen.arrival(n)
        if t0 is not None and t1 is not None:
            out.append(t1 - t0)
    return out


def throughput(names: list[str], creator: Creator, seen: WorkloadWatch) -> dict[str, float]:
    starts = [creator.sent[n] for n in names if n in creator.sent]
    ends = sorted(t for n in names if (t := seen.arrival(n)) is not None)
    if not starts or not ends:
        return {"admitted": 0, "seconds": math.nan, "jobs_per_s": 0.0, "sustained_jobs_per_s": 0.0}
    t0 = min(starts)
    span = ends[-1] - t0
    lo, hi = int(len(ends) * 0.1), int(len(ends) * 0.9) - 1
    sustained = (hi - lo) / (ends[hi] - ends[lo]) if hi > lo and ends[hi] > ends[lo] else math.nan
    return {
        "admitted": len(ends),
        "seconds": span,
        "jobs_per_s": len(ends) / span if span > 0 else math.nan,
        "sustained_jobs_per_s": sustained,
        "first_workload_s": ends[0] - t0,
    }


def per_second(times: list[float], t0: float) -> list[int]:
    if not times:
        return []
    buckets = [0] * (int(max(times) - t0) + 1)
    for t in times:
        buckets[int(t - t0)] += 1
    return buckets


# --- the run ----------------------------------------------------------------------------------


def split_pools(args: argparse.Namespace) -> tuple[list[str], list[str], int, int]:
    per_pool = args.nodes // args.pools
    pool_devices = per_pool * args.devices_per_node
    rate_jobs = round(args.rate * args.rate_seconds)
    rate_pools = math.ceil(rate_jobs / pool_devices) if rate_jobs else 0
    if rate_pools >= args.pools:
        raise SystemExit(
            f"the rate phase ({rate_jobs} jobs) needs {rate_pools} of {args.pools} pools; add nodes or lower the rate"
        )
    run_id = uuid.uuid4().hex[:4]  # fresh node names: a former run's pods may still be bound to its nodes
    names = [f"sb{run_id}-{i:02d}" for i in range(args.pools)]
    return names[rate_pools:], names[:rate_pools], per_pool, rate_jobs


def run(args: argparse.Namespace) -> dict[str, Any]:
    world = kwok_world.start()
    cluster, started, kubeconfig, api, core = world.cluster, world.started, world.kubeconfig, world.api, world.core
    api_factory = world.new_api
    burst_pools, rate_pools, per_pool, rate_jobs = split_pools(args)
    burst_jobs = args.jobs - rate_jobs
    if burst_jobs < 1:
        raise SystemExit("--jobs must exceed rate × rate-seconds")
    namespace = world.new_namespace("scalebench")
    out: dict[str, Any] = {
        "nodes": per_pool * args.pools,
        "pools": args.pools,
        "devices": per_pool * args.pools * args.devices_per_node,
        "jobs": args.jobs,
        "namespace": namespace,
    }
    workdir = Path(tempfile.mkdtemp(prefix="scalebench-"))
    op_log = workdir / "operator.log"
    try:
        t = time.monotonic()
        made = make_pools(api_factory, burst_pools + rate_pools, per_pool, args.devices_per_node, args.node_threads)
        out["node_create_s"] = time.monotonic() - t
        out["node_ready_s"] = wait_ready(core, set(made), args.timeout)
        print(f"{len(made)} nodes in {len(burst_pools + rate_pools)} pools ready", flush=True)

        extra = {"ACCEL_OPERATOR_RESYNC_SECONDS": str(args.resync)}
        if args.bind_timeout is not None:
            extra["ACCEL_OPERATOR_BIND_TIMEOUT_SECONDS"] = str(args.bind_timeout)
        if args.malloc_arena_max:
            # As the Deployment runs it (manifests/operator/deployment.yaml): glibc's arenas capped.
            extra["MALLOC_ARENA_MAX"] = str(args.malloc_arena_max)
        out["malloc_arena_max"] = args.malloc_arena_max or None
        profile = workdir / "operator.prof" if args.profile else None
        with operator_process(kubeconfig, args.metrics_port, op_log, extra, profile, traced=args.tracemalloc) as proc:

            def alive() -> bool:
                return proc.poll() is None

            rss = RssSampler(proc.pid)
            rss.start()
            wait_metrics(args.metrics_port, 300 if args.tracemalloc else 60)  # tracing slows the start
            time.sleep(args.settle)  # its watches list what is there, the first passes run
            out["rss_idle_mb"] = rss.samples[-1][1] / 1e6 if rss.samples else math.nan
            watcher = WorkloadWatch(api_factory(), namespace)
            watcher.start()
            creator = Creator(api_factory, args.clients)
            try:
                # (a) burst
                docs = [job_doc(namespace, f"b-{i:05d}", burst_pools[i % len(burst_pools)]) for i in range(burst_jobs)]
                fits = min(burst_jobs, len(burst_pools) * per_pool * args.devices_per_node)
                print(f"burst: {burst_jobs} jobs ({fits} fit) from {args.clients} threads ...", flush=True)
                pids = {"operator": proc.pid, **{c.name: c.pid for c in cluster.status()}}
                out["idle_cores"] = cores_used(pids, 5.0)
                cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
                req0 = api_requests(api)
                ops0 = scrape(args.metrics_port)
                tb0 = time.monotonic()
                create_s = burst(creator, docs)
                names = [d["metadata"]["name"] for d in docs]
                got = watcher.wait_count(set(names), fits, args.timeout, alive)
                tb1 = time.monotonic()
                tp = throughput(names, creator, watcher)
                lat = latencies(names, creator, watcher)
                arrivals = sorted(a for n in names if (a := watcher.arrival(n)) is not None)
                out["burst"] = {
                    "jobs": burst_jobs,
                    "fit": fits,
                    "created": sum(1 for n in names if n in creator.sent),
                    "create_failures": len([f for f in creator.failed if f.startswith("b-")]),
                    "create_s": create_s,
                    "create_jobs_per_s": burst_jobs / create_s,
                    **tp,
                    "complete": got >= fits,
                    "latency_p50_s": pct(lat, 50),
                    "latency_p99_s": pct(lat, 99),
                    "latency_max_s": max(lat, default=math.nan),
                    "workloads_per_second": per_second(arrivals, tb0),
                    "rss_peak_mb": rss.peak_between(tb0, tb1) / 1e6,
                    "cpu_s": {k: round(cpu_seconds(p) - cpu0[k], 1) for k, p in pids.items()},
                }
                print(f"burst: {got}/{fits} admitted in {tp['seconds']:.1f}s", flush=True)
                time.sleep(args.settle)
                # Every client's requests (the bench's creates, the operator's, the controllers',
                # kube-scheduler's, KWOK's) per job of the burst, up to the end of the settle.
                req1 = api_requests(api)
                out["burst"]["api_requests_per_job"] = per_job(req0, req1, fits)
                ops1 = scrape(args.metrics_port)
                if 'accel_operator_api_writes_total{write="event"}' not in ops1:  # an operator before that counter
                    ops1['accel_operator_api_writes_total{write="event"}'] = float(operator_events(api, namespace))
                # Per admitted job (a burst cut short by --timeout admitted fewer than fit).
                out["burst"]["operator_writes_per_job"] = operator_writes(req0, req1, ops0, ops1, max(1, got))
                out["burst"]["stored_bytes"] = stored_sizes(api, namespace)
                if args.drain_timeout > 0:
                    print("burst: waiting for the control plane to go quiet ...", flush=True)
                    waited, cores = drain(pids, out["idle_cores"], args.drain_timeout)
                    out["burst"]["drain_s"] = waited + args.settle
                    out["burst"]["drain_cores"] = cores
                    # The same writes up to the end of the aftermath: the Running statuses and the
                    # Events that were still queued when the last workload arrived.
                    req2, ops2 = api_requests(api), scrape(args.metrics_port)
                    drained = operator_writes(req0, req2, ops0, ops2, max(1, got))
                    out["burst"]["operator_writes_per_job_drained"] = {
                        **drained,
                        **writes_by_kind(api, namespace, ops0, ops2, max(1, got)),
                    }
                # (b) fixed rate
                if rate_jobs:
                    docs = [job_doc(namespace, f"r-{i:05d}", rate_pools[i % len(rate_pools)]) for i in range(rate_jobs)]
                    print(f"rate: {rate_jobs} jobs at {args.rate}/s ...", flush=True)
                    cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
                    tr0 = time.monotonic()
                    offer_s = fixed_rate(creator, docs, args.rate)
                    names = [d["metadata"]["name"] for d in docs]
                    got = watcher.wait_count(set(names), rate_jobs, args.timeout, alive)
                    tr1 = time.monotonic()
                    lat = latencies(names, creator, watcher)
                    windows: dict[int, list[float]] = {}
                    for n in names:
                        t0, t1 = creator.sent.get(n), watcher.arrival(n)
                        if t0 is not None and t1 is not None:
                            windows.setdefault(int((t0 - tr0) // 10), []).append(t1 - t0)
                    out["rate_windows"] = {
                        f"{10 * k}-{10 * k + 10}s": [round(pct(w, 50), 2), round(pct(w, 99), 2)]
                        for k, w in sorted(windows.items())
                    }
                    out["rate"] = {
                        "offered_jobs_per_s": args.rate,
                        "jobs": rate_jobs,
                        "offered_achieved_jobs_per_s": rate_jobs / offer_s,
                        "admitted": got,
                        "complete": got >= rate_jobs,
                        "latency_p50_s": pct(lat, 50),
                        "latency_p90_s": pct(lat, 90),
                        "latency_p99_s": pct(lat, 99),
                        "latency_max_s": max(lat, default=math.nan),
                        "rss_peak_mb": rss.peak_between(tr0, tr1) / 1e6,
                        "seconds": tr1 - tr0,
                        "cpu_s": {k: round(cpu_seconds(p) - cpu0[k], 1) for k, p in pids.items()},
                    }
                metrics = scrape(args.metrics_port)
                if not alive():
                    raise SystemExit(f"the operator exited ({proc.returncode}); its log: {op_log}")
            finally:
                creator.close()
                watcher.stop()
                rss.stop()
        out["rss_peak_mb"] = rss.peak / 1e6
        out["rss_hwm_mb"] = rss.hwm / 1e6
        out["watch_errors"] = watcher.errors
        out["create_failures"] = creator.failed[:5]
        out["operator"] = {
            k: metrics.get(k)
            for k in (
                "accel_operator_pass_seconds_count",
                "accel_operator_pass_seconds_sum",
                "accel_operator_workloads_created_total",
                "accel_operator_admission_latency_seconds_count",
                "accel_operator_admission_latency_seconds_sum",
                'accel_operator_decisions_total{phase="Pending"}',
                'accel_operator_decisions_total{phase="Admitted"}',
                'accel_operator_decisions_total{phase="Running"}',
            )
        }
        out["operator_log"] = str(op_log)
    finally:
        if "burst" in out:  # the figures first: the clean-up of a full run takes minutes
            print()
            print(table(out), flush=True)
        try:
            cleanup(api, core, namespace, burst_pools + rate_pools, stop_cluster=started and not args.keep_cluster)
        except (client.ApiException, urllib3.exceptions.HTTPError, OSError) as exc:  # the figures matter more
            print(f"clean-up failed ({type(exc).__name__}: {str(exc)[:200]}); remove namespace {namespace} by hand")
            out["cleanup_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return out


def _writes(w: dict[str, Any]) -> str:
    """One line of the operator's writes per admitted job, by kind."""
    return (
        f"{w['total']:.2f} (status patches {w['status patches']:.2f}, Events {w['Events']:.2f}, "
        f"Job creates {w['Job creates']:.2f}; Events coalesced {w['Events coalesced (not written)']:.2f})"
    )


def table(out: dict[str, Any]) -> str:
    b, r = out.get("burst", {}), out.get("rate", {})
    rows = [
        ("nodes (KWOK, 8 × H100)", f"{out['nodes']} in {out['pools']} pools, {out['devices']} devices"),
        ("jobs (1 H100 each)", f"{out['jobs']}: burst {b.get('jobs')} ({b.get('fit')} fit), rate {r.get('jobs', 0)}"),
        ("burst: create rate", f"{b.get('create_jobs_per_s', math.nan):.1f} jobs/s"),
        ("burst: admitted", f"{b.get('admitted')} of {b.get('fit')} in {b.get('seconds', math.nan):.1f} s"),
        ("burst: throughput (first create → last workload)", f"{b.get('jobs_per_s', math.nan):.1f} jobs/s"),
        ("burst: sustained (10–90 % of admissions)", f"{b.get('sustained_jobs_per_s', math.nan):.1f} jobs/s"),
        (
            "burst: latency p50 / p99",
            f"{b.get('latency_p50_s', math.nan):.2f} / {b.get('latency_p99_s', math.nan):.2f} s",
        ),
    ]
    if "drain_s" in b:
        rows.append(
            (
                "burst: until the control plane is quiet again",
                f"{b['drain_s']:.0f} s ({b['drain_cores']:.2f} cores; idle {out.get('idle_cores', math.nan):.2f})",
            )
        )
    if r:
        rows += [
            (
                f"rate: offered {r['offered_jobs_per_s']}/s (achieved)",
                f"{r['offered_achieved_jobs_per_s']:.1f} jobs/s, {r['admitted']} of {r['jobs']} admitted",
            ),
            (
                "rate: latency p50 / p90 / p99 / max",
                f"{r['latency_p50_s']:.2f} / {r['latency_p90_s']:.2f} / {r['latency_p99_s']:.2f} "
                f"/ {r['latency_max_s']:.2f} s",
            ),
        ]
    for span, (p50, p99) in (out.get("rate_windows") or {}).items():
        rows.append((f"rate: latency p50 / p99, jobs created {span} in", f"{p50:.2f} / {p99:.2f} s"))
    rcpu = r.get("cpu_s") or {}
    if rcpu and r.get("seconds"):
        per = ", ".join(f"{k} {v / r['seconds']:.2f}" for k, v in sorted(rcpu.items(), key=lambda kv: -kv[1]))
        rows.append(("rate: cores used", per))
    rows += [
        (
            "operator RSS: idle / peak (0.2 s samples) / VmHWM",
            f"{out.get('rss_idle_mb', math.nan):.0f} / "
            f"{out.get('rss_peak_mb', math.nan):.0f} / {out.get('rss_hwm_mb', math.nan):.0f} MB",
        ),
    ]
    cpu = b.get("cpu_s") or {}
    if cpu and b.get("admitted"):
        per = ", ".join(f"{k} {1000 * v / b['admitted']:.0f}" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1]))
        rows.append(("burst: CPU-ms per admitted job", per))
    ow = b.get("operator_writes_per_job") or {}
    if ow:
        rows.append(("burst: operator's API writes per admitted job", _writes(ow)))
    od = b.get("operator_writes_per_job_drained") or {}
    if od:
        rows.append(("burst + aftermath: operator's API writes per admitted job", _writes(od)))
        for what in ("decisions applied by phase", "Events by reason"):
            shown = ", ".join(f"{k} {n:.2f}" for k, n in (od.get(what) or {}).items())
            rows.append((f"burst + aftermath: {what} per admitted job", shown))
    for key, n in (b.get("api_requests_per_job") or {}).items():
        rows.append((f"burst: API requests per job: {key}", f"{n:.2f}"))
    for key, n in (b.get("stored_bytes") or {}).items():
        rows.append((f"burst: stored bytes (mean): {key}", f"{n:,.0f}"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {val}" for k, val in rows)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--nodes", type=int, default=500, help="KWOK nodes in all (default 500)")
    p.add_argument("--pools", type=int, default=10, help="pools the nodes are split into (default 10)")
    p.add_argument("--devices-per-node", type=int, default=8)
    p.add_argument("--jobs", type=int, default=5000, help="AcceleratorJobs in all, both phases (default 5000)")
    p.add_argument("--clients", type=int, default=32, help="threads creating jobs (default 32: 8 offered 21/s)")
    p.add_argument("--rate", type=float, default=20.0, help="offered jobs/s in the fixed-rate phase (default 20)")
    p.add_argument("--rate-seconds", type=float, default=60.0, help="length of the fixed-rate phase (default 60)")
    p.add_argument("--timeout", type=float, default=600.0, help="deadline of each wait (default 600 s)")
    p.add_argument("--settle", type=float, default=3.0, help="pause before and between phases (default 3 s)")
    p.add_argument(
        "--drain-timeout",
        type=float,
        default=600.0,
        help="before the rate phase, wait up to this long for the burst's aftermath (its pods made, bound and "
        "Running, their statuses written) to end: the operator and control plane back within 0.2 cores of idle. "
        "0: start the rate phase right after the burst, behind that backlog (default 600 s)",
    )
    p.add_argument("--resync", type=float, default=60.0, help="ACCEL_OPERATOR_RESYNC_SECONDS (default 60)")
    p.add_argument(
        "--bind-timeout",
        type=float,
        help="ACCEL_OPERATOR_BIND_TIMEOUT_SECONDS (default: the operator's, 120 s). On a machine too loaded for "
        "the control plane to bind pods within it, gangs are released and admitted again: churn, not admissions",
    )
    p.add_argument(
        "--malloc-arena-max",
        type=int,
        default=2,
        help="MALLOC_ARENA_MAX for the operator, as its Deployment sets it (default 2; 0: glibc's default, "
        "8 arenas per core)",
    )
    p.add_argument("--metrics-port", type=int, default=int(os.environ.get("ACCEL_BENCH_METRICS_PORT", "0")) or None)
    p.add_argument("--node-threads", type=int, default=16, help="threads creating nodes (default 16)")
    p.add_argument("--profile", action="store_true", help="run the operator under cProfile (operator.prof)")
    p.add_argument("--tracemalloc", type=Path, help="run the operator under tracemalloc; its top sites go here")
    p.add_argument("--keep-cluster", action="store_true", help="leave a control plane this run started running")
    p.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = p.parse_args(argv)
    if args.metrics_port is None:
        base = int(os.environ.get("ACCEL_CLUSTER_PORT_BASE", "26000"))
        args.metrics_port = base + 490
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    out = run(args)
    if args.out:
        args.out.write_text(json.dumps(out, indent=2, default=str) + "\n")
        print(f"\nfigures written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
