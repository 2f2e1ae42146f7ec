"""The engine at fleet size, without an API server: N nodes, M jobs, a virtual clock.

``bench/pass_cost.py`` times single passes over one hand-made world. This script runs the engine
over a synthetic fleet for a whole trace, the way the operator would live through it, with the
API server replaced by the fake writers the unit tests use (``FakeJobWriter``,
``FakeWorkloadClient``, ``FakeCostWriter``) and kopf's indexes by plain dictionaries
(``tests.support.reconcile.World``):

* the world: ``N`` nodes in ``P`` pools, three GPU pools (H100, 8 devices a node) to every TPU pool
  (v5e, 4 a node), spot and on-demand alternating; a share of the nodes not ready or carrying the
  operator's health taint, a share fragmented by other tenants' pods, a few with a node report
  showing a failing device; one AcceleratorPolicy with a monthly budget per team;
* the trace: ``M`` jobs (1 to 512 devices: most small, a tail of gangs of up to 64 nodes; four
  teams in eight namespaces; priorities 0, 10 and 100) arriving on a Poisson trace in virtual
  ticks, a quarter of them at once (the burst) after the first tick; each admitted job's batch Job
  is "seen" (its workload view), its pods bound first-fit to usable nodes of its pool, run for a
  drawn duration and then succeed, freeing their devices;
* each tick: the arrivals and endings as the watch would deliver them (index entries changed,
  the handlers' marks), one pass of the real engine (``Scheduler.step``: observe, decide, health,
  consolidation, policy, the planner with its caches; the writes through the fakes), then the
  writes shown back through the "watch"; every ``--cost-every`` ticks the accountant's step.

Time is the engine's ``ManualClock``, moved by the trace (nothing sleeps). Every cost figure is
CPU time (``time.process_time``: this process, every thread), because the machine's load moves
wall time several-fold. Printed, and written as JSON with ``--out``: pass CPU p50/p99 at steady
state and for the burst pass (with how many it admitted), the pass that decides one new job
arriving into the full queue, admitted jobs per CPU second of the engine, the accountant's step,
and peak RSS. ``--profile`` prints the top functions of the run by own time (largest size).
``--stores`` adds the bytes each store holds at the end (``stores_mb``: a walk of its objects, fast
enough for the largest size). ``--tracemalloc`` adds the bytes live at the end by who allocated
them (``traced_mb``): the engine (code under ``operator/``) apart from the simulated cluster (this
script, ``tests/support``, the fakes' classes); its tracing costs several times the CPU (some 30
times at 2,000 nodes), so its CPU figures are not comparable. ``--fingerprint`` adds
``writes_sha256``: a digest of every write the engine applied, in order (the job, its status
patch, the phase, the admission and block decided, the actions), to compare two trees' decisions
(run both with the same ``PYTHONHASHSEED``: the holding jobs of a pass come in the order of a set).

Run: python bench/sim_scale.py [--sizes 500x5000,2000x20000,10000x100000 | --quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import cProfile
import dataclasses
import gc
import hashlib
import heapq
import inspect
import io
import json
import math
import pstats
import random
import resource
import sys
import time
import tracemalloc
import types
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from accel_api.job import AcceleratorJobSpec, AcceleratorJobStatus
from accel_api.pool import AcceleratorPoolSpec
from accel_operator.adapters.kube import views
from accel_operator.adapters.kube.costs import FakeCostWriter
from accel_operator.adapters.kube.jobs import FakeJobWriter, JobRef
from accel_operator.adapters.kube.workloads import FakeWorkloadClient
from accel_operator.adapters.pricebook import PriceBook
from accel_operator.engine import collector
from accel_operator.engine.accountant import Accountant
from accel_operator.engine.clock import ManualClock
from accel_operator.reconcile.common.snapshot import JobKey, JobView, NodeView, PodView, PoolView, WorkloadView
from accel_operator.settings import OperatorSettings
from accel_operator.simulate.replay import RecordingJobWriter, RecordingWorkloads

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests.support
from tests.support.jobs import example
from tests.support.reconcile import T0, World

SIZES = ((500, 5_000), (2_000, 20_000), (10_000, 100_000))
QUICK = (200, 2_000)
TEAMS = ("research", "serving", "vision", "speech")
TICK_SECONDS = 30.0  # virtual seconds between passes
COST_EVERY = 10  # ticks between accountant steps
PROBES = 20  # single new jobs decided into the full queue at the end
_EXAMPLES: dict[str, dict[str, Any]] = {}  # parsed example documents by accelerator kind


class StoredStatuses(RecordingJobWriter):
    """The simulated API server's statuses kept as an API server keeps them, serialized (compact
    JSON, compressed: etcd holds them in another process), not as live dicts in this one. The
    fake merges each patch into what changed since the watch last looked (``statuses``); the watch
    (:meth:`show`) folds that into the stored form and hands over the whole status. At 10,000
    nodes and 100,000 jobs the live dicts were a tenth of the process's peak RSS that the operator
    never holds (it keeps the parsed views the jobs watch makes: docs/scale.md)."""

    def __init__(self) -> None:
        super().__init__()
        self.stored: dict[tuple[str, str], bytes] = {}
        self.removed: dict[tuple[str, str], set[str]] = {}  # fields a patch since the last look removed

    def patch_status(self, ref: JobRef, status: dict[str, Any]) -> str:
        out = super().patch_status(ref, status)
        gone = self.removed.setdefault((ref.namespace, ref.name), set())
        for k, val in status.items():
            if val is None:
                gone.add(k)
            else:
                gone.discard(k)
        return out

    def show(self, key: tuple[str, str]) -> dict[str, Any]:
        """The whole status as the watch delivers it (and stored serialized again)."""
        packed = self.stored.get(key)
        whole: dict[str, Any] = json.loads(zlib.decompress(packed)) if packed is not None else {}
        for k in self.removed.pop(key, ()):
            whole.pop(k, None)
        whole.update(self.statuses.pop(key, {}))
        self.stored[key] = zlib.compress(json.dumps(whole, separators=(",", ":")).encode(), 1)
        return whole


@dataclasses.dataclass
class Sim:
    """The simulated cluster around one engine: its indexes (a World), the fakes, the trace."""

    nodes: int
    jobs: int
    pools: int
    seed: int
    world: World = dataclasses.field(default_factory=World)
    clock: ManualClock = dataclasses.field(default_factory=lambda: ManualClock(T0))
    rng: random.Random = dataclasses.field(init=False)
    pool_kind: dict[str, str] = dataclasses.field(default_factory=dict)  # pool -> "gpu" | "tpu"
    pool_members: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # usable nodes by pool
    free: dict[str, int] = dataclasses.field(default_factory=dict)  # node -> devices free (the binder's)
    ends: list[tuple[float, int, JobKey, int]] = dataclasses.field(
        default_factory=list
    )  # heap: (at, seq, job, attempt)
    specs: dict[tuple[Any, ...], AcceleratorJobSpec] = dataclasses.field(default_factory=dict)
    seen: dict[JobKey, tuple[str | None, int]] = dataclasses.field(default_factory=dict)  # phase, attempt shown
    admitted: int = 0  # jobs that reached Admitted (or beyond) through the engine
    ended: int = 0  # jobs whose pods ran out their duration and succeeded
    seq: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        w = self.world
        w.clock = self.clock
        # An admission's status at once (a held-back one waits on real time; this clock is virtual).
        w.settings = OperatorSettings(
            cost_rollup="",
            cost_interval_seconds=TICK_SECONDS * COST_EVERY,
            admitted_status_seconds=0,
            waiting_status_seconds=0,
        )
        self.writer = StoredStatuses()
        self.workloads = RecordingWorkloads()
        sched = w.scheduler  # built over the world's indexes with the unit tests' fakes ...
        sched.applier.writer = self.writer  # ... which these record what the watch would show
        sched.applier.workloads = self.workloads
        self.sched = sched
        self.accountant = Accountant(scheduler=sched, writer=self.writer, costs=FakeCostWriter(), prices=PriceBook())

    # --- the world --------------------------------------------------------------------------

    def build(self) -> None:
        w, rng = self.world, self.rng
        per = [self.nodes // self.pools + (1 if p < self.nodes % self.pools else 0) for p in range(self.pools)]
        for p, count in enumerate(per):
            tpu = p % 4 == 3
            spot = p % 2 == 1
            name = f"{'tpu' if tpu else 'h100'}-{'spot' if spot else 'od'}-{p}"
            doc: dict[str, Any] = {
                "provider": "gcp" if tpu else "aws",
                "accelerator": "tpu-v5e" if tpu else "h100-80gb",
                "devicesPerNode": 4 if tpu else 8,
                "capacityType": "spot" if spot else "on-demand",
                "maxNodes": max(count, 1),
                "region": "us-west4" if tpu else "us-east-1",
                "zone": "us-west4-a" if tpu else "us-east-1a",
            }
            if tpu:
                doc["tpuTopology"] = "2x4"
            w.pools[name] = [(PoolView(name, AcceleratorPoolSpec.model_validate(doc)), ())]
            self.pool_kind[name] = "tpu" if tpu else "gpu"
            self.pool_members[name] = []
            size = doc["devicesPerNode"]
            for i in range(count):
                node = f"{name}-{i}"
                roll = rng.random()
                view = NodeView(node, {"accel.dev/pool": name}, size, uid=f"uid-{node}")
                if roll < 0.02:
                    view = dataclasses.replace(view, ready=False)  # not ready
                elif roll < 0.03:
                    view = dataclasses.replace(view, health_taint=True)  # tainted by the operator
                elif roll < 0.035:
                    w.report(node, sick={0: "xid-79"}, devices=size, now=T0)  # condemned by its report
                w.nodes[node] = [view]
                self.free[node] = size
                if roll < 0.035:
                    self.free[node] = 0
                    continue
                self.pool_members[name].append(node)
                if roll < 0.15:  # fragmented: another tenant's pod holds part of it
                    used = rng.randint(1, size - 1)
                    pod = PodView("other", f"user-{node}", node, "Running", used)
                    w.pods.setdefault(node, []).append(pod)
                    self.free[node] -= used
        w.policy(
            "budgets",
            budgets=[
                {"team": t, "period": "monthly", "limitUsd": 5_000_000 if t != "speech" else 20_000} for t in TEAMS
            ],
            maxDevicesPerJob=512,
        )
        for i in range(8):
            w.team(f"ns-{i}", TEAMS[i % len(TEAMS)])
        self.sched.kopf_listed()

    def _spec(self, kind: str, devices: int, pools: tuple[str, ...], team: str, priority: int) -> AcceleratorJobSpec:
        """Specs are immutable and shared: one parse per shape (the watch would parse each job)."""
        key = (kind, devices, pools, team, priority)
        spec = self.specs.get(key)
        if spec is None:
            extra: dict[str, Any] = {"team": team, "priority": priority}
            spot = any("spot" in p for p in pools)
            if spot:
                extra["spot"] = {"policy": "prefer", "maxPreemptions": 5}
                extra["checkpoint"] = {"uri": f"s3://ckpt/{team}/sim", "intervalMinutes": 20}
            # examples/01 (examples/04's model, sharded to fit v5e's 16 GB, for TPU), read once.
            base = _EXAMPLES.get(kind)
            if base is None:
                base = _EXAMPLES[kind] = example(
                    "04-tpu-training.yaml" if kind == "tpu" else "01-finetune-single-gpu.yaml"
                )
            doc = copy.deepcopy(base)
            doc["spec"]["placement"] = {"minDevices": devices, "maxDevices": devices}
            doc["spec"].update(extra)
            doc["spec"]["placement"]["pools"] = list(pools)
            doc["spec"]["placement"]["acceleratorKinds"] = [kind]
            spec = self.specs[key] = AcceleratorJobSpec.model_validate(doc["spec"])
        return spec

    def _devices(self, kind: str) -> int:
        roll = self.rng.random()
        if kind == "tpu":
            return 8 if roll < 0.6 else 16 if roll < 0.9 else 32  # whole 2x4 slices
        if roll < 0.45:
            return 1
        if roll < 0.8:
            return self.rng.choice((2, 4, 8))
        if roll < 0.97:
            return self.rng.choice((16, 32, 64))
        return self.rng.choice((128, 256, 512))

    def arrive(self, index: int) -> JobKey:
        """A new job, as the jobs watch shows it; the handler marks it."""
        rng = self.rng
        names = list(self.pool_kind)
        first = rng.choice(names)
        kind = self.pool_kind[first]
        same = [p for p in names if self.pool_kind[p] == kind and p != first]
        pools = (first, rng.choice(same)) if same and rng.random() < 0.5 else (first,)
        ns = f"ns-{rng.randrange(8)}"
        team = TEAMS[int(ns.rsplit("-", 1)[1]) % len(TEAMS)]
        priority = rng.choice((0, 0, 0, 10, 100))
        spec = self._spec(kind, self._devices(kind), pools, team, priority)
        name = f"j-{index:06d}"
        view = JobView(ns, name, f"uid-{name}", self.clock.now(), 1, spec, (), AcceleratorJobStatus())
        key = (ns, name)
        self.world.jobs[key] = [view]
        self.sched.mark(key)
        return key

    # --- the watch and the rest of the cluster ---------------------------------------------------

    def settle(self) -> None:
        """Show the engine's writes as the watch would: the statuses written, the batch Jobs created
        (their pods bound first-fit to usable nodes of the pool, each run for a drawn duration)."""
        w, sched = self.world, self.sched
        # In key order, not the order the writes' threads finished: the pods bind first-fit and
        # draw their run times in this order, so a run is the same run every time.
        for key in sorted(self.writer.written):
            entries = w.jobs.get(key)
            if not entries:
                continue
            job: JobView = entries[0]
            status = views.job_status(self.writer.show(key))  # as the jobs watch parses it
            w.jobs[key] = [dataclasses.replace(job, status=status, resource_version=str(self.writer.revision))]
            sched.mark(key)
            before = self.seen.get(key, (None, -1))
            now = (status.phase.value if status.phase is not None else None, status.attempt)
            if before[0] in (None, "Pending", "Queued") and now[0] in ("Admitted", "Running"):
                self.admitted += 1
            self.seen[key] = now
        self.writer.written.clear()
        self.writer.events.clear()  # the fake's record of Events: not the engine's memory
        for wkey in sorted(self.workloads.created):
            body = self.workloads.jobs.pop(wkey, None)  # the simulated API server keeps no bodies
            if body is None:
                continue
            job_key = (wkey[0], wkey[1].rsplit("-a", 1)[0])
            attempt = int(wkey[1].rsplit("-a", 1)[1])
            job = w.jobs[job_key][0]
            plan = job.status.plan
            assert plan is not None and plan.pool and plan.devices
            nodes_n = plan.nodes or 1
            per_node = plan.devices // nodes_n
            wl = WorkloadView(wkey[0], wkey[1], job_key, attempt, active=nodes_n, owner_uid=job.uid)
            w.workloads[wkey] = [wl]
            sched.workload_changed(wkey, job_key)
            placed = self._bind(plan.pool, nodes_n, per_node)
            for i in range(nodes_n):
                node = placed[i] if placed else None
                pod = PodView(
                    wkey[0],
                    f"{wkey[1]}-{i}",
                    node,
                    "Running" if node else "Pending",
                    per_node,
                    job_key,
                    attempt,
                    created=self.clock.now(),
                    started=self.clock.now() if node else None,
                )
                w.pods.setdefault(job_key, []).append(pod)
                if node:
                    w.pods.setdefault(node, []).append(pod)
                sched.pods_changed(None, pod)
            if placed:
                self.seq += 1
                run = self.rng.expovariate(1.0 / (TICK_SECONDS * 20))
                heapq.heappush(self.ends, (self.clock.monotonic() + run, self.seq, job_key, attempt))
        self.workloads.created.clear()
        self.workloads.calls.clear()

    def _bind(self, pool: str, count: int, per_node: int) -> list[str] | None:
        """kube-scheduler, first fit: ``count`` usable nodes of ``pool`` with ``per_node`` free
        each, or None (the gang's pods stay Pending: fragmentation)."""
        chosen = []
        for node in self.pool_members.get(pool, ()):
            if self.free[node] >= per_node:
                chosen.append(node)
                if len(chosen) == count:
                    for n in chosen:
                        self.free[n] -= per_node
                    return chosen
        return None

    def finish_due(self) -> int:
        """Pods whose run is over succeed (their workload completes): devices free again."""
        w, sched = self.world, self.sched
        done = 0
        while self.ends and self.ends[0][0] <= self.clock.monotonic():
            _at, _seq, key, attempt = heapq.heappop(self.ends)
            pods = w.pods.get(key, [])
            ended = []
            for pod in pods:
                if pod.attempt == attempt and not pod.ended and pod.node:
                    new = dataclasses.replace(pod, phase="Succeeded", exit_code=0, finished=self.clock.now())
                    node_pods = w.pods[pod.node]
                    node_pods[node_pods.index(pod)] = new
                    self.free[pod.node] += pod.devices
                    ended.append((pod, new))
            if not ended:
                continue
            replaced = {id(old): new for old, new in ended}
            w.pods[key] = [replaced.get(id(p), p) for p in pods]
            for old, new in ended:
                sched.pods_changed(old, new)
            wkey = (key[0], f"{key[1]}-a{attempt}")
            wl = w.workloads.get(wkey)
            if wl:
                w.workloads[wkey] = [
                    dataclasses.replace(wl[0], active=0, succeeded=len(ended), complete=True, end_time=self.clock.now())
                ]
                sched.workload_changed(wkey, key)
            self.ended += 1
            done += 1
        return done

    # --- the engine's passes ------------------------------------------------------------------

    async def one_pass(self) -> tuple[float, float]:
        """CPU seconds of one pass (``Scheduler.step``: observe, decide, the writes queued) and of
        applying its writes through the fakes (the write tasks it started, run to the end)."""
        t0 = time.process_time()
        await self.sched.step()
        took = time.process_time() - t0
        t1 = time.process_time()
        while self.sched.applier.in_flight:
            await asyncio.gather(*list(self.sched.applier.in_flight))
        return took, time.process_time() - t1


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def _ms(values: Iterable[float]) -> dict[str, float]:
    vals = list(values)
    return {
        "p50_ms": round(_pct(vals, 0.5) * 1000, 2),
        "p99_ms": round(_pct(vals, 0.99) * 1000, 2),
        "max_ms": round(max(vals, default=0.0) * 1000, 2),
        "n": len(vals),
    }


def _rss_mb() -> float:
    """Peak RSS of this process (Linux reports kilobytes)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


ROOT = Path(__file__).resolve().parents[1]


def _fake_regions() -> list[tuple[str, int, int]]:
    """(file, first line, last line) of the fakes' classes: what they allocate is the cluster's."""
    out = []
    for cls in (FakeJobWriter, FakeWorkloadClient, FakeCostWriter, RecordingJobWriter, RecordingWorkloads):
        for klass in cls.__mro__:
            if klass is object or not klass.__module__.startswith("accel_"):
                continue
            lines, first = inspect.getsourcelines(klass)
            out.append((str(Path(inspect.getfile(klass)).resolve()), first, first + len(lines) - 1))
    return out


def _traced(snapshot: tracemalloc.Snapshot) -> dict[str, float]:
    """Bytes live at the end (MB) by who allocated them: the innermost frame in this repository
    decides (a library's allocation is its caller's): the engine (``operator/``), the simulated
    cluster (this script, ``tests/``, the fakes' classes), or other (imports, libraries alone)."""
    fakes = _fake_regions()
    cluster_roots = (str(ROOT / "bench"), str(ROOT / "tests"))
    engine_root = str(ROOT / "operator")
    sums = {"engine": 0, "simulated_cluster": 0, "other": 0}
    for stat in snapshot.statistics("traceback"):
        who = "other"
        for frame in reversed(stat.traceback):  # the most recent frame first
            name = frame.filename
            if name.startswith(cluster_roots) or any(f == name and a <= frame.lineno <= b for f, a, b in fakes):
                who = "simulated_cluster"
                break
            if name.startswith(engine_root):
                who = "engine"
                break
        sums[who] += stat.size
    return {k: round(v / 1e6, 1) for k, v in sums.items()}


_NOT_HELD = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.CodeType)


def _stores(sim: Sim) -> dict[str, float]:
    """The bytes (MB, ``sys.getsizeof`` over every object reachable, each counted once) each store
    holds at the end, in this order: an object two stores share counts in the first. Modules,
    classes and functions are not counted (the imports, the same in every run)."""
    sched = sim.sched
    seen = {id(m) for m in list(sys.modules.values())}
    parts: list[tuple[str, object]] = [
        ("jobs index: job views, specs, statuses", sim.world.jobs),
        ("simulated API server: statuses, Events", sim.writer),
        (
            "pods, workloads, nodes indexes",
            (sim.world.pods, sim.world.workloads, sim.world.nodes, sim.world.indices.reports),
        ),
        ("simulated cluster: binder, trace", (sim.ends, sim.seen, sim.specs, sim.free, sim.pool_members)),
        ("engine: parsed values shared (views.SHARED)", views.SHARED),
        ("engine: folded cache (Observed)", sched.observed),
        ("engine: plans and the planner's memos", sched.plans),
        ("engine: policy inputs and their memo", sched.folded_policies),
        ("engine: writes, overlay, Event series", (sched.applier, sched.marks)),
        ("engine: accountant", sim.accountant),
    ]
    out = {}
    for name, root in parts:
        total, stack = 0, [root]
        while stack:
            obj = stack.pop()
            if id(obj) in seen or isinstance(obj, _NOT_HELD):
                continue
            seen.add(id(obj))
            total += sys.getsizeof(obj)
            stack.extend(gc.get_referents(obj))
        out[name] = round(total / 1e6, 1)
    return out


def _phases(world: World) -> dict[str, int]:
    out: dict[str, int] = {}
    for entries in world.jobs.values():
        ph = entries[0].status.phase
        name = ph.value if ph is not None else "new"
        out[name] = out.get(name, 0) + 1
    return dict(sorted(out.items()))


async def simulate(
    nodes: int,
    jobs: int,
    *,
    pools: int | None = None,
    ticks: int = 120,
    seed: int = 1,
    trace: bool = False,
    stores: bool = False,
    fingerprint: bool = False,
) -> dict[str, Any]:
    """One run at (``nodes``, ``jobs``); the figures as a dict (the JSON's row). ``trace``: with
    the live bytes by owner (``traced_mb``, tracemalloc: slow)."""
    if trace:
        tracemalloc.start(32)
    pools = pools or max(4, min(100, nodes // 50))  # 10 pools at 500 nodes (as bench/scale.py), 100 at 10k
    sim = Sim(nodes=nodes, jobs=jobs, pools=pools, seed=seed)
    writes = hashlib.sha256() if fingerprint else None
    if writes is not None:
        apply = sim.sched.applier.apply

        def recorded(w: Any, pools: Any) -> None:
            d = w.decision
            acts = [(type(a).__name__, getattr(a, "pool", None), getattr(a, "devices", None)) for a in d.actions]
            seen = [list(w.job.key), w.patch, d.phase.value, repr(d.admitted), repr(d.blocks), acts]
            assert writes is not None
            writes.update(json.dumps(seen, sort_keys=True, default=str).encode() + b"\n")
            apply(w, pools)

        sim.sched.applier.apply = recorded  # type: ignore[method-assign]
    t_build = time.process_time()
    sim.build()
    burst_n = jobs // 4
    steady_n = jobs - burst_n - PROBES
    # The steady trace: Poisson arrivals over ``ticks`` ticks, after the burst tick.
    per_tick = steady_n / ticks
    index = 0
    pass_cpu: list[float] = []
    apply_cpu: list[float] = []
    steady: list[float] = []
    cost: list[float] = []
    first = await sim.one_pass()  # the empty fleet: every node and pool folded once
    build_s = time.process_time() - t_build
    # The burst: a quarter of the jobs arrive at once.
    for _ in range(burst_n):
        sim.arrive(index)
        index += 1
    before = sim.writer.revision
    burst, burst_apply = await sim.one_pass()
    burst_writes = sim.writer.revision - before
    sim.settle()
    burst_admitted = sim.admitted
    pass_cpu.append(burst)
    apply_cpu.append(burst_apply)
    # Progress on stderr (the largest size runs for long on a shared machine: how far it got).
    print(
        f"[{nodes}x{jobs}] burst of {burst_n}: pass {burst * 1000:.0f} ms CPU, {burst_admitted} admitted",
        file=sys.stderr,
        flush=True,
    )
    for tick in range(ticks + 5):
        sim.clock.advance(TICK_SECONDS)
        if tick < ticks:
            left = jobs - PROBES - index
            n = left if tick == ticks - 1 else min(_poisson(sim.rng, per_tick), left)  # all of M arrive
            for _ in range(n):
                sim.arrive(index)
                index += 1
        sim.finish_due()
        took, applied = await sim.one_pass()
        sim.settle()
        pass_cpu.append(took)
        apply_cpu.append(applied)
        if tick >= ticks // 4:  # past the burst's wake: the steady state
            steady.append(took)
        if tick % COST_EVERY == 0:
            t0 = time.process_time()
            await sim.accountant.step(sim.clock.now())
            cost.append(time.process_time() - t0)
            print(
                f"[{nodes}x{jobs}] tick {tick} of {ticks + 5}: pass {took * 1000:.0f} ms, accountant "
                f"{cost[-1] * 1000:.0f} ms, {sim.admitted} admitted, {time.process_time():.0f} s CPU so far",
                file=sys.stderr,
                flush=True,
            )
    # The queue is full: single new jobs, each decided by a pass of its own.
    probes: list[float] = []
    for _ in range(PROBES):
        sim.clock.advance(1.0)
        sim.arrive(index)
        index += 1
        took, _applied = await sim.one_pass()
        probes.append(took)
        sim.settle()
    engine_cpu = sum(pass_cpu) + sum(apply_cpu)
    phases = _phases(sim.world)
    held = _stores(sim) if stores else None
    traced: dict[str, float] | None = None
    if trace:
        traced = _traced(tracemalloc.take_snapshot())
        tracemalloc.stop()
    return {
        "nodes": nodes,
        "jobs": jobs,
        "pools": pools,
        "devices": sum(e[0].devices for e in sim.world.nodes.values()),
        "ticks": ticks,
        "tick_seconds": TICK_SECONDS,
        "build_cpu_s": round(build_s, 3),
        "first_pass_ms": round(first[0] * 1000, 2),
        "burst": {
            "jobs": burst_n,
            "pass_ms": round(burst * 1000, 1),
            "apply_ms": round(burst_apply * 1000, 1),
            "admitted": burst_admitted,
            "status_writes": burst_writes,
            "ms_per_1000_admitted": round(burst * 1000 / max(burst_admitted, 1) * 1000, 1),
        },
        "steady_pass": _ms(steady),
        "apply_per_pass": _ms(apply_cpu[1:]),
        "new_job_into_full_queue": {**_ms(probes), "queued": phases.get("Queued", 0) + phases.get("Pending", 0)},
        "admitted": sim.admitted,
        "ended": sim.ended,
        "admitted_per_cpu_s": round(sim.admitted / engine_cpu, 1) if engine_cpu else None,
        "engine_cpu_s": round(engine_cpu, 2),
        "accountant_step": _ms(cost),
        "peak_rss_mb": _rss_mb(),
        **({"traced_mb": traced} if traced is not None else {}),
        **({"stores_mb": held} if held is not None else {}),
        **({"writes_sha256": writes.hexdigest()} if writes is not None else {}),
        "phases": phases,
    }


def _poisson(rng: random.Random, mean: float) -> int:
    """A Poisson draw (normal approximation above 30: the means here are in the hundreds)."""
    if mean > 30:
        return max(0, round(rng.gauss(mean, math.sqrt(mean))))
    limit, k, p = math.exp(-mean), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def _table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'N':>6} {'M':>7} {'burst ms':>9} {'(admits)':>8} {'steady p50':>10} {'p99':>8} {'new job p50':>11} "
        f"{'p99':>7} {'adm/cpu-s':>9} {'acct p50':>9} {'max':>8} {'RSS MB':>7}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['nodes']:>6} {r['jobs']:>7} {r['burst']['pass_ms']:>9.1f} {r['burst']['admitted']:>8} "
            f"{r['steady_pass']['p50_ms']:>10.1f} {r['steady_pass']['p99_ms']:>8.1f} "
            f"{r['new_job_into_full_queue']['p50_ms']:>11.1f} {r['new_job_into_full_queue']['p99_ms']:>7.1f} "
            f"{r['admitted_per_cpu_s']:>9} {r['accountant_step']['p50_ms']:>9.1f} "
            f"{r['accountant_step']['max_ms']:>8.1f} {r['peak_rss_mb']:>7}"
        )
    return "\n".join(lines)


def _sizes(text: str) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        n, _, m = part.strip().partition("x")
        if not n.isdigit() or not m.isdigit() or int(n) < 8 or int(m) < 4 * PROBES:
            raise SystemExit(f"--sizes: {part.strip()[:40]!r} is not NODESxJOBS (e.g. 500x5000, at least 8x80)")
        out.append((int(n), int(m)))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default=",".join(f"{n}x{m}" for n, m in SIZES), help="NODESxJOBS, comma-separated")
    p.add_argument("--quick", action="store_true", help=f"one small size ({QUICK[0]}x{QUICK[1]}, 40 ticks): CI")
    p.add_argument("--ticks", type=int, default=120, help="steady-state ticks after the burst (default 120)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, help="write the figures as JSON here (other sizes' rows in it are kept)")
    p.add_argument("--profile", action="store_true", help="cProfile the last size: top functions by own time")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--tracemalloc", action="store_true", help="live bytes at the end: engine vs simulated cluster")
    p.add_argument("--stores", action="store_true", help="bytes each store holds at the end (an object walk)")
    p.add_argument("--fingerprint", action="store_true", help="a digest of every write applied, in order")
    args = p.parse_args(argv)
    sizes = [QUICK] if args.quick else _sizes(args.sizes)
    collector.tune()  # the collector's thresholds the operator runs with (engine/collector.py)
    ticks = 40 if args.quick else args.ticks
    rows = []
    for i, (n, m) in enumerate(sizes):
        profiler = cProfile.Profile() if args.profile and i == len(sizes) - 1 else None
        if profiler:
            profiler.enable()
        row = asyncio.run(
            simulate(
                n,
                m,
                ticks=ticks,
                seed=args.seed,
                trace=args.tracemalloc,
                stores=args.stores,
                fingerprint=args.fingerprint,
            )
        )
        if profiler:
            profiler.disable()
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(args.top)
            print(out.getvalue())
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(_table(rows))
    if args.out:
        # Rows of other sizes already in the file are kept (each size may run in its own process,
        # so that its peak RSS is its own), sorted by size; a size run again replaces its row.
        kept = []
        if args.out.exists():
            kept = [
                r for r in json.loads(args.out.read_text()).get("sizes", []) if (r["nodes"], r["jobs"]) not in sizes
            ]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        merged = sorted([*kept, *rows], key=lambda r: (r["nodes"], r["jobs"]))
        doc = {"bench": "sim_scale", "cpu": "time.process_time (this process, all threads)", "sizes": merged}
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
