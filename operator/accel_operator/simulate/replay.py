"""The engine on a virtual clock, over a simulated cluster: one replay of a trace under a strategy.

The engine is the operator's own (``Scheduler.step``: observe, decide, plan, the writes) with the
API server replaced by the adapters' fakes (``FakeJobWriter``, ``FakeWorkloadClient``,
``FakeCostWriter``) and kopf's indexes by plain dictionaries, as ``bench/sim_scale.py`` runs it;
cost is the real accountant's ledger (``Accountant.step``, prices from the pools' specs). The rest
of the cluster is simulated here, event by event (nothing sleeps; the clock jumps to the next
event):

* every pool holds ``maxNodes`` nodes from the start (idle capacity is not charged: the ledger
  charges pods, not nodes; autoscaling delays are not modelled);
* each batch Job the engine creates has its pods bound first fit to nodes of the planned pool
  (kube-scheduler's part; a gang that does not fit waits until devices free up);
* an attempt runs for the planner's estimated duration (``status.plan.durationSeconds``) times the
  share of the work still to do, plus the pool's ``restartSeconds`` when it resumes;
* on a spot pool, each node of an attempt is preempted as a Poisson process of the pool's
  ``preemptionRatePerHour`` (seeded): the attempt's pods fail as disrupted, the engine decides the
  retry (or the fallback to on-demand), and the work since the last checkpoint
  (``checkpoint.intervalMinutes``; without a checkpoint, all of the attempt's work) is lost;
* a disruption line of the trace (``trace.Disruption``) fails one attempt's pods the same way, a
  set time after they started (with pools whose rate is 0, the replay is then what a real cluster
  does: ``tests/support/simplayer.py`` plays the trace there, tests/cluster compares them).

Everything drawn comes from one ``random.Random(seed)``, consumed in a fixed order: the same
trace, pools and seed give the same figures.
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import datetime as dt
import heapq
import math
import random
import re
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any, TypeVar, TypeVarTuple

from accel_api import bounds, catalog, vocabulary
from accel_api.enums import BudgetPeriod, CapacityType, JobPhase, SpotPolicy
from accel_api.job import AcceleratorJobSpec, AcceleratorJobStatus
from accel_api.policy import AcceleratorPolicy, AcceleratorPolicyStatus
from accel_api.pool import AcceleratorPool
from accel_operator.adapters.aws.checkpoints import FakeCheckpointStore
from accel_operator.adapters.kube import views
from accel_operator.adapters.kube.costs import FakeCostWriter
from accel_operator.adapters.kube.jobs import FakeJobWriter, JobRef
from accel_operator.adapters.kube.workloads import FakeWorkloadClient
from accel_operator.adapters.pricebook import PriceBook
from accel_operator.engine import calls
from accel_operator.engine.accountant import Accountant
from accel_operator.engine.clock import ManualClock
from accel_operator.engine.scheduler import Indices, Scheduler
from accel_operator.metrics import OperatorMetrics
from accel_operator.planning import cost
from accel_operator.reconcile.common.checkpoints import Checkpoint
from accel_operator.reconcile.common.decision import DISRUPTION_RULE
from accel_operator.reconcile.common.snapshot import (
    Admission,
    JobKey,
    JobView,
    NodeView,
    PodView,
    PoolView,
    WorkloadView,
)
from accel_operator.reconcile.job import policy_gate
from accel_operator.settings import OperatorSettings
from accel_operator.simulate.trace import Arrival, Disruption, Point

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)  # the trace's second 0 (fixed: figures do not move with today)
COST_EVERY = 3600.0  # virtual seconds between the accountant's steps (and one at the end)
IDLE_STEP = 300.0  # while jobs wait, the engine passes at least this often (its timers, retries)
STUCK_AFTER = 6 * 3600.0  # after the last event, jobs that waited this long with nothing changing are left
PERIOD_SECONDS = {BudgetPeriod.DAILY: 86_400.0, BudgetPeriod.WEEKLY: 7 * 86_400.0, BudgetPeriod.MONTHLY: 31 * 86_400.0}
PASSES_PER_EVENT = 4  # passes at one instant while each pass still writes something


def run_seconds(duration: float, done: float, restart: float) -> float:
    """How long an attempt runs: its restart overhead, then the share of the work left."""
    return restart + (1.0 - done) * duration


def saved_seconds(worked: float, interval_minutes: float | None) -> float:
    """The work an attempt has checkpointed after ``worked`` seconds (a save every interval)."""
    if not interval_minutes:
        return 0.0
    return math.floor(worked / (interval_minutes * 60.0)) * interval_minutes * 60.0


T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class Inline(ThreadPoolExecutor):
    """An executor that runs each call at once in the caller's thread. The engine's writes go
    to the adapters' fakes, which answer in microseconds: a real thread per write only added a
    hand-off and a wait on the event loop's selector for each (half the replay's wall time on a
    busy machine). Order is unchanged: the event loop awaits the finished future as it would
    a thread's."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="accel-sim-unused")  # never starts a thread

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        out: Future[T] = Future()
        try:
            out.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task, as a thread's would be
            out.set_exception(exc)
        return out


class InlineLoop(asyncio.SelectorEventLoop):
    """The event loop of a replay: a call handed to an :class:`Inline` executor (the engine's
    writes, the accountant's ``asyncio.to_thread``) runs at once, and its result is handed to the
    awaiting task through one ``call_soon``. That is the order the plain loop gives an executor's
    finished future (``wrap_future`` hands the result over in one ``call_soon_threadsafe``, queued
    at the call), without the thread-safe future, its lock and the self-pipe write each call cost
    (about 50,000 calls in the sample's replay)."""

    inline_default = False  # whether the default executor (asyncio.to_thread's) is an Inline

    def run_in_executor(self, executor: Executor | None, func: Callable[[*Ts], T], *args: *Ts) -> asyncio.Future[T]:
        if not (isinstance(executor, Inline) or (executor is None and self.inline_default)):
            return super().run_in_executor(executor, func, *args)
        out: asyncio.Future[T] = self.create_future()
        try:
            value = func(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task, as Inline.submit does
            self.call_soon(_hand_over, out, None, exc)
        else:
            self.call_soon(_hand_over, out, value, None)
        return out


def _hand_over(out: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
    if out.cancelled():
        return
    if exc is not None:
        out.set_exception(exc)
    else:
        out.set_result(value)


def inline_pools() -> calls.CallPools:
    """The engine's call pools with every kind of call run inline (:class:`Inline`)."""
    pools = calls.CallPools(1)
    pools.shutdown()
    pools.lease, pools.writes, pools.events = Inline(), Inline(), Inline()
    return pools


@dataclasses.dataclass(frozen=True)
class Strategy:
    """How the trace is run: ``engine`` (this engine, the jobs as submitted), ``on-demand`` (the
    same engine, every job's spot policy ``never``) or ``ordered-flavors`` (a Kueue-style
    baseline in front of the engine, see :meth:`Replay._admit_ordered`)."""

    name: str
    spot: bool = True
    ordered: bool = False
    # AcceleratorPolicies in force (``--policy``): the engine applies them as it does in the
    # cluster (planning.policy through the reconciler's gate, the accountant's team spend).
    policies: tuple[AcceleratorPolicy, ...] = ()


STRATEGIES = {
    "engine": Strategy("engine"),
    "on-demand": Strategy("on-demand", spot=False),
    "ordered-flavors": Strategy("ordered-flavors", ordered=True),
}


_RULE = re.compile(r"\(rule ([a-z0-9-]{1,63})\)")
MAX_RULES = 8  # rule ids kept per refused job


@dataclasses.dataclass(frozen=True, slots=True)
class Placement:
    """Where and how long an attempt's gang runs, as its batch Job says."""

    pool: str
    devices: int
    nodes: int
    duration_seconds: float | None


def _placement(admission: Admission | None, status: AcceleratorJobStatus, attempt: int) -> Placement | None:
    """The placement of ``attempt`` from the admission its batch Job records (the job's status
    may not say it yet: the operator holds an admission's status until its pods are bound), else
    from the status when it says that attempt; None: neither does."""
    if admission is not None and admission.attempt == attempt and admission.devices:
        return Placement(admission.pool, admission.devices, admission.nodes or 1, admission.duration_seconds)
    plan = status.plan
    if status.attempt != attempt or plan is None or not plan.pool or not plan.devices:
        return None
    return Placement(plan.pool, plan.devices, plan.nodes or 1, plan.duration_seconds)


def _refusing_rules(status: AcceleratorJobStatus) -> tuple[str, ...]:
    """The policy rules that refuse a job, as the reconciler's gate wrote them
    (``PolicyCompliant=False``, reason ``PolicyViolation``: every rule but a queueing budget);
    empty when it is not refused by a policy."""
    for cond in status.conditions:
        if cond.type == policy_gate.POLICY and cond.status == "False" and cond.reason == "PolicyViolation":
            rules = tuple(dict.fromkeys(_RULE.findall(cond.message or "")))[:MAX_RULES]
            return rules or ("policy",)
    return ()


@dataclasses.dataclass(frozen=True)
class Recorded:
    """What a replay takes from recordings instead of drawing it: spot (or on-demand) prices
    over time, interruptions over time (a pool with any replaces its Poisson process), and each
    pool's early-warning lead time (seconds before an interruption that a job with a checkpoint
    saves, as a trainer does on the operator's checkpoint-now notice; a pool not named gets its
    cloud's, ``planning.cost.notice_seconds``)."""

    prices: tuple[Point, ...] = ()
    interruptions: tuple[Point, ...] = ()
    warning: dict[str, float] = dataclasses.field(default_factory=dict)


class RecordingJobWriter(FakeJobWriter):
    """The fake, noting which jobs were written since the simulated watch last looked, and which
    fields of their statuses (also bench/sim_scale.py's)."""

    def __init__(self) -> None:
        super().__init__()
        self.written: dict[tuple[str, str], set[str]] = {}
        # Per job written since the last look: how many patches, and the revision of the last.
        self.patches: dict[tuple[str, str], tuple[int, int]] = {}

    def patch_status(self, ref: JobRef, status: dict[str, Any]) -> str:
        out = super().patch_status(ref, status)
        key = (ref.namespace, ref.name)
        self.written.setdefault(key, set()).update(status)
        count, _last = self.patches.get(key, (0, 0))
        self.patches[key] = (count + 1, self.revision)
        return out


def reparsed(before: AcceleratorJobStatus, wire: dict[str, Any], written: set[str]) -> AcceleratorJobStatus:
    """The status ``wire`` holds, given ``before``, the model of what it held before the fields
    ``written`` (wire names) were patched: those fields validated again, the others kept
    (``views.job_status_patched``). What ``model_validate(wire)`` gives, without validating again
    the plan and conditions a cost write left as they were (the accountant writes ``cost`` alone,
    hourly, for every running job). Parsed as the jobs watch parses a status (``views.job_status``:
    equal plans and conditions shared)."""
    return views.job_status_patched(before, wire, written)


@dataclasses.dataclass
class NotingScheduler(Scheduler):
    """The engine, noting the model of each background status write (the accountant's ledger:
    ``{"cost": CostStatus}``, what it wrote as its wire form) by job, with the fields it wrote,
    until the simulated watch looks (:meth:`Replay._shown`)."""

    noted: dict[JobKey, tuple[frozenset[str], dict[str, Any]]] = dataclasses.field(default_factory=dict)

    async def background_status(
        self, patch_status: Callable[..., str], job: JobView, patch: dict[str, Any], shown: dict[str, Any]
    ) -> bool:
        written = await super().background_status(patch_status, job, patch, shown)
        if written:
            self.noted[job.key] = (frozenset(patch), shown)
        return written


class RecordingWorkloads(FakeWorkloadClient):
    """The fake, noting the batch Jobs created since the simulated watch last looked."""

    def __init__(self) -> None:
        super().__init__()
        self.created: list[tuple[str, str]] = []

    def create(self, job: dict[str, Any], service: dict[str, Any] | None) -> bool:
        # Not the fake's create: it deep-copies the whole body (3% of a replay), which the
        # simulated API server drops at the next look (``Replay._settle``) unread.
        key = (job["metadata"]["namespace"], job["metadata"]["name"])
        if key in self.jobs:
            return False
        self.jobs[key] = job
        self.created.append(key)
        return True


@dataclasses.dataclass
class JobRecord:
    """What the simulator saw of one job (the ledger is in its status, the engine's)."""

    arrival: Arrival
    first_start: float | None = None  # virtual seconds
    end: float | None = None
    done: float = 0.0  # share of the work checkpointed (0..1)
    preemptions: int = 0
    lost_device_seconds: float = 0.0  # work lost to preemption (since the last checkpoint)
    attempt_start: float = 0.0
    attempt_devices: int = 0
    attempt_duration: float = 0.0  # the plan's estimate for the whole job on this attempt's pool
    attempt_restart: float = 0.0
    flavor: str | None = None  # ordered-flavors: the pool its quota was taken from
    memory_failed: bool = False  # ordered-flavors: the pool chosen cannot hold the job in memory
    refused: tuple[str, ...] = ()  # the policy rules that refused it (as the webhook would)
    pool: str | None = None  # the pool of its current (or last) attempt


@dataclasses.dataclass
class Result:
    """One replay's outcome: each job's record and final status, the fleet."""

    strategy: str
    seed: int
    records: dict[JobKey, JobRecord]
    statuses: dict[JobKey, AcceleratorJobStatus]
    devices: int  # every pool's maxNodes × devicesPerNode
    span_seconds: float  # from the trace's start to the last job's end
    passes: int
    # Device-seconds the pods held, per pool, and each pool's devices and price (USD per
    # device-hour, as the accountant quotes it): what the idle figure is made of.
    busy: dict[str, float] = dataclasses.field(default_factory=dict)
    pool_devices: dict[str, int] = dataclasses.field(default_factory=dict)
    pool_price: dict[str, float] = dataclasses.field(default_factory=dict)
    # The highest spend each policy reported per (team, period, period start), with its limit.
    spend: dict[tuple[str, str, str, str], tuple[float, float]] = dataclasses.field(default_factory=dict)
    # (hours since the start, the ledger's total so far) at each of the accountant's steps.
    cost_series: list[tuple[float, float]] = dataclasses.field(default_factory=list)


class Replay:
    def __init__(
        self,
        pools: Sequence[AcceleratorPool],
        arrivals: Sequence[Arrival],
        *,
        seed: int,
        strategy: Strategy,
        progress: Callable[[int], None] | None = None,
        disruptions: Sequence[Disruption] = (),
        recorded: Recorded | None = None,
    ):
        # the trace's disruptions: (job name, attempt) -> seconds after its pods started
        self.disrupt = {(d.job, d.attempt): d.after for d in disruptions}
        self.recorded = recorded or Recorded()
        self.recorded_pools = {p.pool for p in self.recorded.interruptions}  # no Poisson draws there
        self.progress = progress  # told how many jobs have arrived, as the replay goes
        self.arrivals = list(arrivals)
        self.strategy = strategy
        self.seed = seed
        self.rng = random.Random(seed)
        self.clock = ManualClock(T0)
        self.t = 0.0
        self.pools: dict[str, Any] = {}
        self.nodes: dict[str, Any] = {}
        self.pods: dict[Any, list[PodView]] = {}
        self.workloads_idx: dict[Any, Any] = {}
        self.jobs: dict[Any, Any] = {}
        self.teams: dict[str, list[str | None]] = {}
        # An admission's status is held as the operator holds it (``admitted_status_seconds``, the
        # operator's default): its batch Job, which records it, first; the status with Running in
        # the pass after its pods are bound, or by itself once due on the virtual clock
        # (``Applier.release_due``, called as the clock moves). The simulated cluster reads an
        # attempt's placement from its Job's admission, as the real Job controller never reads
        # the AcceleratorJob's status.
        settings = OperatorSettings(cost_rollup="", cost_interval_seconds=COST_EVERY)
        self.writer = RecordingJobWriter()
        self.workloads = RecordingWorkloads()
        self.checkpoints = FakeCheckpointStore()  # answers the checkpoints this simulator "wrote"
        self.sched = NotingScheduler(
            settings=settings,
            catalog=catalog.default(),
            writer=self.writer,
            workloads=self.workloads,
            metrics=OperatorMetrics(),
            clock=self.clock,
            checkpoints=self.checkpoints,
        )
        self.sched.applier.pools = inline_pools()
        self.policy_idx: dict[str, list[AcceleratorPolicy]] = {
            p.metadata.name or "": [p] for p in strategy.policies
        }  # each namespace is labelled with its team (self.teams): the policies' team rules bind
        self.sched.indices = Indices(
            self.pools, self.nodes, self.pods, self.workloads_idx, self.jobs, self.policy_idx, self.teams
        )
        self.sched.policies_changed()
        self.costs = FakeCostWriter()
        self.prices = PriceBook()
        self.accountant = Accountant(scheduler=self.sched, writer=self.writer, costs=self.costs, prices=self.prices)
        self.policy_shown: dict[str, dict[str, Any]] = {}
        self.spend: dict[tuple[str, str, str, str], tuple[float, float]] = {}
        self.spent_by_job: dict[JobKey, float] = {}
        self.spent_total = 0.0
        self.cost_series: list[tuple[float, float]] = []
        self.pool_spec = {p.metadata.name: p.spec for p in pools if p.metadata.name}  # read_pools: all named
        # Each pool's notice lead time: the recorded one (--warning), else its cloud's (the planner's too).
        self.lead = {
            name: self.recorded.warning.get(name, cost.notice_seconds(spec)) for name, spec in self.pool_spec.items()
        }
        self.members: dict[str, list[str]] = {}
        self._pool_of_node: dict[str, str] = {}
        self.free: dict[str, int] = {}
        # First fit without walking the pool: per pool, for each d up to its devices per node, the
        # places (in the pool's order) of its nodes with at least d devices free. The walk was
        # over every node of the pool at each start: quadratic once the fleet grows with the jobs.
        self.fits: dict[str, list[list[int]]] = {}
        self._place: dict[str, int] = {}
        for name, spec in self.pool_spec.items():
            self.pools[name] = [(PoolView(name, spec), ())]
            self.members[name] = []
            self.fits[name] = [list(range(spec.max_nodes)) for _ in range(spec.devices_per_node + 1)]
            for i in range(spec.max_nodes):
                node = f"{name}-{i}"
                labels = {**spec.node_selector, "accel.dev/pool": name}  # the pool's selector matches its nodes
                self.nodes[node] = [NodeView(node, labels, spec.devices_per_node, uid=f"uid-{node}")]
                self.members[name].append(node)
                self._pool_of_node[node] = name
                self._place[node] = i
                self.free[node] = spec.devices_per_node
        self.devices = sum(s.max_nodes * s.devices_per_node for s in self.pool_spec.values())
        self.busy: dict[str, float] = dict.fromkeys(self.pool_spec, 0.0)
        self.records: dict[JobKey, JobRecord] = {}
        # (at, seq, kind, job, attempt, node): "end" or "preempt" of one attempt
        self.events: list[tuple[float, int, str, JobKey, int, str]] = []
        self.unbound: list[tuple[str, str]] = []  # workloads whose gang waits for devices
        self.placements: dict[tuple[str, str], Placement] = {}  # their admissions, until they start
        self.live: dict[JobKey, int] = {}  # jobs with an attempt running (an event due): the attempt
        self.open = 0  # jobs submitted to the engine and not ended
        # ordered-flavors: the flavors in order (spot pools first, then on-demand, each in the
        # file's order), the devices of each pool's quota in use, the jobs not admitted yet.
        kinds = {s.capacity_type for s in self.pool_spec.values()}
        self.flavors = [
            n
            for want in (CapacityType.SPOT, CapacityType.ON_DEMAND)
            if want in kinds
            for n, s in self.pool_spec.items()
            if s.capacity_type is want
        ]
        self.quota_used: dict[str, int] = dict.fromkeys(self.pool_spec, 0)
        self.backlog: list[Arrival] = []
        self.backlog_changed = False  # an arrival or a released quota since the backlog's last walk
        self.seq = 0
        self.passes = 0
        self.result: Result | None = None

    # --- the trace ----------------------------------------------------------------------------

    def _arrive(self, a: Arrival) -> None:
        if self.strategy.ordered:
            self.backlog.append(a)
            self.backlog_changed = True
            return
        spec: AcceleratorJobSpec = a.spec
        if not self.strategy.spot and spec.spot.policy is not SpotPolicy.NEVER:
            spec = spec.model_copy(update={"spot": spec.spot.model_copy(update={"policy": SpotPolicy.NEVER})})
        self._submit(a, spec)

    def _admit_ordered(self) -> bool:
        """The Kueue-style baseline: jobs in arrival order (best-effort FIFO: one that does not fit
        lets the next try), each sized as submitted (``maxDevices``, else ``minDevices``: no memory
        or throughput model), admitted to the first flavor in order (spot first) whose quota (the
        pool's devices) has room (spot flavors skipped for a job whose spot policy is
        ``never``), then handed to the engine pinned there (its pool, its size, spot
        ``require`` on a spot flavor, else ``never``). A job the pinned pool cannot hold in memory
        is counted failed for memory. A preempted job retries on its flavor (Kueue would requeue it
        and may pick another flavor: not modelled). True when it admitted any.

        The backlog is walked again only after an arrival or a quota's release: a walk only takes
        quota, so what it left would be left again (a queue of thousands was walked before each
        of the four passes at every event)."""
        if not self.backlog_changed:
            return False
        self.backlog_changed = False
        admitted = False
        left = []
        for a in self.backlog:
            p = a.spec.placement
            devices = p.max_devices or p.min_devices
            kinds = set(p.accelerator_kinds)
            chosen = None
            for name in self.flavors:
                spec = self.pool_spec[name]
                if spec.capacity_type is CapacityType.SPOT and a.spec.spot.policy is SpotPolicy.NEVER:
                    continue  # a job kept off spot (in Kueue: a node selector that excludes the spot flavor)
                acc = self.sched.catalog.get(spec.accelerator)
                if kinds and (acc is None or acc.kind not in kinds):
                    continue
                if p.accelerator_types and spec.accelerator not in p.accelerator_types:
                    continue
                if spec.max_nodes * spec.devices_per_node - self.quota_used[name] >= devices:
                    chosen = name
                    break
            if chosen is None:
                left.append(a)
                continue
            spot = self.pool_spec[chosen].capacity_type is CapacityType.SPOT
            placement = p.model_copy(update={"pools": [chosen], "min_devices": devices, "max_devices": devices})
            policy = SpotPolicy.REQUIRE if spot else SpotPolicy.NEVER
            # No cap on preemptions: Kueue admits by quota alone, and the Job controller recreates
            # a pod the cloud took back under the same admission, however often. The job's own
            # spot.maxPreemptions is this engine's rule: kept, the planner refused a long gang on
            # a busy spot flavor for the preemptions it expects, and the baseline never ran it.
            pinned = a.spec.model_copy(
                update={
                    "placement": placement,
                    "spot": a.spec.spot.model_copy(update={"policy": policy, "max_preemptions": bounds.PREEMPTIONS}),
                }
            )
            self._submit(a, pinned)
            self.records[(a.team, a.name)].flavor = chosen
            self.quota_used[chosen] += devices
            admitted = True
        self.backlog = left
        return admitted

    def _release(self, key: JobKey) -> None:
        rec = self.records[key]
        if rec.flavor is not None:
            p = rec.arrival.spec.placement
            self.quota_used[rec.flavor] -= p.max_devices or p.min_devices
            rec.flavor = None
            self.backlog_changed = True

    def _submit(self, a: Arrival, spec: AcceleratorJobSpec) -> None:
        key = (a.team, a.name)
        self.teams.setdefault(a.team, [a.team])
        self.jobs[key] = [
            JobView(a.team, a.name, f"uid-{a.name}", self.clock.now(), 1, spec, (), AcceleratorJobStatus())
        ]
        self.records[key] = JobRecord(a)
        self.open += 1
        self.sched.mark(key)

    # --- the watch: the engine's writes shown back --------------------------------------------

    def _settle(self) -> bool:
        """Show the writes since the last look; True when there were any."""
        changed = bool(self.writer.written or self.workloads.created)
        for key, fields in sorted(self.writer.written.items()):
            entries = self.jobs.get(key)
            if not entries:
                continue
            status = self._shown(key, entries[0].status, fields)
            self.jobs[key] = [
                dataclasses.replace(entries[0], status=status, resource_version=str(self.writer.revision))
            ]
            self.sched.mark(key)
            rec = self.records[key]
            spent = status.cost.spent_usd if status.cost is not None else 0.0
            self.spent_total += spent - self.spent_by_job.get(key, 0.0)
            self.spent_by_job[key] = spent
            if status.phase is JobPhase.UNSCHEDULABLE and rec.end is None and self.strategy.policies:
                rules = _refusing_rules(status)
                if rules:  # refused by a policy: the webhook would not have let it in
                    rec.end, rec.refused = self.t, rules
                    self.open -= 1
                    continue
            if status.phase in (JobPhase.SUCCEEDED, JobPhase.FAILED) and rec.end is None:
                rec.end = self.t
                self.open -= 1
                self._release(key)
            elif self.strategy.ordered and status.phase is JobPhase.UNSCHEDULABLE and rec.end is None:
                rec.end, rec.memory_failed = self.t, True  # pinned where it does not fit: it never runs
                self.open -= 1
                self._release(key)
        self.writer.written.clear()
        self.writer.patches.clear()
        self.sched.noted.clear()
        self.writer.events.clear()
        self.writer.series.clear()
        for wkey in self.workloads.created:
            body = self.workloads.jobs.pop(wkey, None)  # the simulated API server keeps no bodies
            job_key = (wkey[0], wkey[1].rsplit("-a", 1)[0])
            attempt = int(wkey[1].rsplit("-a", 1)[1])
            job = self.jobs[job_key][0]
            note = (body or {}).get("metadata", {}).get("annotations", {}).get(vocabulary.ANNOTATION_ADMISSION)
            admission = views.admission_of(note)
            placed = _placement(admission, job.status, attempt)
            if placed is None:
                continue
            self.placements[wkey] = placed
            self.workloads_idx[wkey] = [
                WorkloadView(
                    wkey[0],
                    wkey[1],
                    job_key,
                    attempt,
                    active=placed.nodes,
                    owner_uid=job.uid,
                    created=self.clock.now(),
                    admission=admission,
                )
            ]
            self.sched.workload_changed(wkey, job_key)
            self.unbound.append(wkey)
        self.workloads.created.clear()
        self.workloads.calls.clear()
        self._bind_waiting()
        return changed

    def _shown(self, key: JobKey, before: AcceleratorJobStatus, fields: set[str]) -> AcceleratorJobStatus:
        """The status of ``key`` as the watch shows it after the writes since the last look:
        ``before`` with the fields written since validated again (:func:`reparsed`). When those
        writes were one status patch whose model the engine holds, that model is taken instead of
        parsing the same fields a second time: a decision's status is the applier's overlay (the
        status the job was decided on, which is ``before``, as every write is shown before the
        next pass, with the patch's fields validated: ``views.job_status_patched``), a ledger's
        write is ``before`` with the accountant's own ``CostStatus`` (``NotingScheduler``). At
        every look that is what the parse gives (a unit test compares them over a replay)."""
        count, revision = self.writer.patches.get(key, (0, 0))
        if count == 1:
            pending = self.sched.applier.overlay.get(key)
            if pending is not None and pending.revision == revision:
                return pending.status
            noted = self.sched.noted.get(key)
            if pending is None and noted is not None and noted[0] == fields:
                return before.model_copy(update=noted[1])
        return reparsed(before, self.writer.statuses[key], fields)

    def _bind_waiting(self) -> None:
        still = []
        for wkey in self.unbound:
            if not self._start(wkey):
                still.append(wkey)
        self.unbound = still

    def _start(self, wkey: tuple[str, str]) -> bool:
        """Bind the gang of ``wkey`` first fit and start its run; False when it does not fit."""
        job_key = (wkey[0], wkey[1].rsplit("-a", 1)[0])
        attempt = int(wkey[1].rsplit("-a", 1)[1])
        wl = self.workloads_idx.get(wkey)
        job = self.jobs[job_key][0]
        plan = self.placements.get(wkey)
        if not wl or not wl[0].running or job.status.attempt > attempt or plan is None:
            self.placements.pop(wkey, None)
            return True  # superseded: nothing to bind
        nodes_n = plan.nodes
        per_node = plan.devices // nodes_n
        fits = self.fits.get(plan.pool, [])
        places = fits[max(0, per_node)][:nodes_n] if per_node < len(fits) else []
        if len(places) < nodes_n:
            return False
        chosen = [self.members[plan.pool][k] for k in places]
        now = self.clock.now()
        for i, node in enumerate(chosen):
            self._set_free(node, self.free[node] - per_node)
            pod = PodView(
                wkey[0],
                f"{wkey[1]}-{i}",
                node,
                "Running",
                per_node,
                job_key,
                attempt,
                created=now,
                started=now,
                uid=f"uid-{wkey[1]}-{i}",
            )
            self.pods.setdefault(job_key, []).append(pod)
            self.pods.setdefault(node, []).append(pod)
            self.sched.pods_changed(None, pod)
        self.workloads_idx[wkey] = [dataclasses.replace(wl[0], ready=nodes_n, start_time=now)]
        self.sched.workload_changed(wkey, job_key)
        rec = self.records[job_key]
        if rec.first_start is None:
            rec.first_start = self.t
        spec = self.pool_spec[plan.pool]
        rec.attempt_start = self.t
        rec.pool = plan.pool
        rec.attempt_devices = plan.devices
        rec.attempt_duration = max(plan.duration_seconds or 60.0, 1.0)
        del self.placements[wkey]
        rec.attempt_restart = spec.restart_seconds if attempt > 0 else 0.0  # attempt 0 is the first
        run = run_seconds(rec.attempt_duration, rec.done, rec.attempt_restart)
        self.seq += 1
        spot = spec.capacity_type is CapacityType.SPOT and plan.pool not in self.recorded_pools
        rate = (spec.preemption_rate_per_hour or 0.0) if spot else 0.0
        hit = self.rng.expovariate(rate * nodes_n / 3600.0) if rate > 0 else math.inf
        hit = min(hit, self.disrupt.get((job_key[1], attempt), math.inf))
        self.live[job_key] = attempt
        if hit < run:
            heapq.heappush(self.events, (self.t + hit, self.seq, "preempt", job_key, attempt, self.rng.choice(chosen)))
        else:
            heapq.heappush(self.events, (self.t + run, self.seq, "end", job_key, attempt, ""))
        return True

    def _set_free(self, node: str, free: int) -> None:
        """``node``'s free devices are ``free`` now: its place joins or leaves the pool's fits."""
        old, self.free[node] = self.free[node], free
        fits, place = self.fits[self._pool_of_node[node]], self._place[node]
        top = len(fits) - 1
        for d in range(min(old, top) + 1, min(free, top) + 1):  # now fits d: joins in order
            bisect.insort(fits[d], place)
        for d in range(min(free, top) + 1, min(old, top) + 1):  # no longer fits d: leaves
            del fits[d][bisect.bisect_left(fits[d], place)]

    def _finish(self, kind: str, key: JobKey, attempt: int) -> None:
        """An attempt's pods end: all succeed ("end"), or all fail as disrupted ("preempt")."""
        now = self.clock.now()
        pods = self.pods.get(key, [])
        ended: dict[int, PodView] = {}
        for i, pod in enumerate(pods):
            if pod.attempt != attempt or pod.ended or not pod.node:
                continue
            if kind == "end":
                new = dataclasses.replace(pod, phase="Succeeded", exit_code=0, finished=now)
            else:
                new = dataclasses.replace(
                    pod, phase="Failed", exit_code=137, disrupted=True, reason="Terminated", finished=now
                )
            # By node the engine reads only the pods not ended (a node's devices in use): an ended
            # pod leaves its node's list, which then holds what runs there, not its whole history
            # (found by identity: PodView's field-by-field == was most of the search).
            node_pods = self.pods[pod.node]
            del node_pods[next(k for k, p in enumerate(node_pods) if p is pod)]
            self._set_free(pod.node, self.free[pod.node] + pod.devices)
            if pod.started is not None:
                held = (now - pod.started).total_seconds() * pod.devices
                self.busy[self._pool_of_node[pod.node]] += held
            ended[i] = new
        if not ended:
            return
        olds = [pods[i] for i in ended]
        self.pods[key] = [ended.get(i, p) for i, p in enumerate(pods)]
        for i, new in ended.items():
            self.sched.pods_changed(pods[i], new)
        wkey = (key[0], f"{key[1]}-a{attempt}")
        wl = self.workloads_idx.get(wkey)
        rec = self.records[key]
        if wl:
            if kind == "end":
                upd: dict[str, Any] = {
                    "active": 0,
                    "ready": 0,
                    "succeeded": len(ended),
                    "complete": True,
                    "end_time": now,
                }
            else:
                upd = {
                    "active": 0,
                    "ready": 0,
                    "failed": len(ended),
                    "failed_condition": True,
                    "failure_reason": "PodFailurePolicy",
                    "failure_message": f"Pod {olds[0].name} has condition DisruptionTarget matching FailJob "
                    f"{DISRUPTION_RULE}",
                    "end_time": now,
                }
            self.workloads_idx[wkey] = [dataclasses.replace(wl[0], **upd)]
            self.sched.workload_changed(wkey, key)
        if kind == "preempt":
            worked = max(0.0, self.t - rec.attempt_start - rec.attempt_restart)
            job = self.jobs[key][0]
            ckpt = job.spec.checkpoint if job.spec is not None else None
            saved = saved_seconds(worked, ckpt.interval_minutes if ckpt else None)
            lead = self.lead.get(rec.pool or "", 0.0)
            if ckpt is not None and lead > 0:
                saved = max(saved, worked - lead)  # saved at the warning: only the lead's work is lost
            rec.done = min(1.0, rec.done + saved / rec.attempt_duration)
            rec.preemptions += 1
            if ckpt is not None and rec.done > 0:
                step = round(rec.done * 1_000_000)  # the checkpoint's step: the share of the work done
                at = now - dt.timedelta(seconds=worked - saved)  # when it was saved, not now
                self.checkpoints.latest[ckpt.uri] = Checkpoint(uri=f"{ckpt.uri}/step-{step}", step=step, time=at)
            rec.lost_device_seconds += (self.t - rec.attempt_start - saved) * rec.attempt_devices

    # --- recorded series ---------------------------------------------------------------------

    def _interrupt(self, pool: str, count: int) -> None:
        """``count`` of ``pool``'s nodes that hold running pods are interrupted (drawn from the
        seeded generator): every attempt with a pod there fails as disrupted."""
        busy = [n for n in self.members[pool] if any(not p.ended for p in self.pods.get(n, ()))]
        for node in sorted(self.rng.sample(busy, min(count, len(busy)))):
            for pod in list(self.pods.get(node, ())):
                if pod.ended or pod.job is None or pod.attempt is None:
                    continue
                if self.live.get(pod.job) == pod.attempt:
                    del self.live[pod.job]
                self._finish("preempt", pod.job, pod.attempt)

    def _price(self, pool: str, price: float) -> None:
        """``pool``'s price (spot price on a spot pool) is ``price`` from now: the planner and the
        accountant read it from the pool, as a pool whose price source updates it."""
        spec = self.pool_spec[pool]
        field = "spot_per_device_hour" if spec.capacity_type is CapacityType.SPOT else "on_demand_per_device_hour"
        new = spec.model_copy(update={"price": spec.price.model_copy(update={field: price})})
        self.pool_spec[pool] = new
        self.pools[pool] = [(PoolView(pool, new), ())]
        self.sched.pools_changed()

    # --- the loop -----------------------------------------------------------------------------

    async def _pass(self) -> None:
        await self.sched.step()
        while self.sched.applier.in_flight:
            await asyncio.gather(*list(self.sched.applier.in_flight))
        self.passes += 1

    def _advance(self, to: float) -> None:
        if to > self.t:
            self.clock.advance(to - self.t)
            self.t = to

    def _waiting(self) -> bool:
        """Whether a job that arrived is neither ended nor running an attempt (queued, retrying,
        its gang unbound): the engine's timers need passes then; a running one needs none until
        its attempt ends."""
        return bool(self.backlog) or len(self.live) < self.open

    def _marked(self) -> bool:
        """Whether the engine has anything to decide (what makes the operator's loop run a pass:
        ``engine.loop.run``): a pass with nothing marked decides no job, so none is run."""
        return self.sched.marks.pending()

    async def run(self) -> None:
        """Replay to the end; the outcome is :attr:`result`. (Not returned: ``asyncio.run``
        formats its main task, result included, when it restores the SIGINT handler, and the
        repr of a whole replay's statuses took seconds.)"""
        # The accountant's work (asyncio.to_thread) inline too (see Inline).
        loop = asyncio.get_running_loop()
        loop.set_default_executor(Inline())
        if isinstance(loop, InlineLoop):
            loop.inline_default = True
        self.sched.kopf_listed()
        await self._pass()
        i, n = 0, len(self.arrivals)
        prices, interruptions = list(self.recorded.prices), list(self.recorded.interruptions)
        pi = ii = 0
        next_cost = COST_EVERY
        quiet_since = 0.0
        # A job a budget holds waits for the budget's next period: the replay waits as long.
        periods = [PERIOD_SECONDS[b.period] for p in self.strategy.policies for b in p.spec.budgets]
        stuck_after = max([STUCK_AFTER, *(p + COST_EVERY for p in periods)])
        while True:
            nexts = []
            if i < n:
                nexts.append(self.arrivals[i].submit)
            if self.events:
                nexts.append(self.events[0][0])
            if pi < len(prices):
                nexts.append(prices[pi].at)
            if ii < len(interruptions) and (self.live or i < n):
                nexts.append(interruptions[ii].at)
            held = self.sched.applier.next_release()
            if held is not None:  # a held admission goes out by itself then (its gang unbound)
                nexts.append(self.t + max(0.0, held - self.clock.monotonic()))
            waiting = self._waiting()
            if waiting and self._marked():
                nexts.append(self.t + IDLE_STEP)  # the engine's timers: a retry, a job to decide again
            elif waiting or self.open:
                # Nothing to decide: the clock jumps; the ledger still steps on the hour while
                # jobs run or wait (the spend the budgets read, the cost over time).
                nexts.append(next_cost)
            if not nexts or (i >= n and not self.events and self.t - quiet_since > stuck_after):
                break
            at = min(nexts)
            if (waiting or self.open) and next_cost < at:
                at = next_cost
            self._advance(at)
            event = False
            if self.sched.applier.release_due():
                while self.sched.applier.in_flight:
                    await asyncio.gather(*list(self.sched.applier.in_flight))
                event = self._settle() or event
            while i < n and self.arrivals[i].submit <= self.t:
                self._arrive(self.arrivals[i])
                i += 1
                event = True
            if event and self.progress is not None:
                self.progress(i)
            while pi < len(prices) and prices[pi].at <= self.t:
                self._price(prices[pi].pool, prices[pi].value)
                pi += 1
                event = True
            while ii < len(interruptions) and interruptions[ii].at <= self.t:
                self._interrupt(interruptions[ii].pool, int(interruptions[ii].value))
                ii += 1
                event = True
            while self.events and self.events[0][0] <= self.t:
                _at, _seq, kind, key, attempt, _node = heapq.heappop(self.events)
                if self.live.get(key) == attempt:
                    del self.live[key]
                self._finish(kind, key, attempt)
                event = True
            self._bind_waiting()
            for _ in range(PASSES_PER_EVENT):
                if self.strategy.ordered and self._admit_ordered():
                    event = True
                if not self._marked():
                    break  # nothing to decide: the operator's loop would not pass either
                await self._pass()
                if not self._settle():
                    break
                event = True
            if event:
                quiet_since = self.t
            if self.t >= next_cost:
                await self._ledger()
                next_cost = (math.floor(self.t / COST_EVERY) + 1) * COST_EVERY
        await self._pass()
        self._settle()
        await self._ledger()
        for a in self.backlog:  # ordered-flavors: never admitted (no flavor's quota holds it)
            self.records[(a.team, a.name)] = JobRecord(a)
        statuses = {
            key: self.jobs[key][0].status if key in self.jobs else AcceleratorJobStatus() for key in self.records
        }
        ends = [r.end for r in self.records.values() if r.end is not None]
        self.result = Result(
            strategy=self.strategy.name,
            seed=self.seed,
            records=self.records,
            statuses=statuses,
            devices=self.devices,
            span_seconds=max(ends, default=self.t),
            passes=self.passes,
            busy=dict(self.busy),
            pool_devices={n: s.max_nodes * s.devices_per_node for n, s in self.pool_spec.items()},
            pool_price=self._pool_prices(),
            spend=dict(self.spend),
            cost_series=list(self.cost_series),
        )

    def _pool_prices(self) -> dict[str, float]:
        """Each pool's price per device-hour as the accountant quotes it (spot pools: spot)."""
        out = {}
        for name, spec in self.pool_spec.items():
            accel = self.sched.catalog.get(spec.accelerator)
            quote = self.prices.quote(spec, accel) if accel is not None else None
            out[name] = quote.usd_per_device_hour if quote is not None else 0.0
        return out

    async def _ledger(self) -> None:
        """One step of the accountant; its writes shown back (the jobs' ledgers, the policies'
        spend, which the budgets read, as the policies' watch shows them to the operator)."""
        await self.accountant.step(self.clock.now())
        self._settle()
        changed = False
        for name, status in self.costs.policies.items():
            if name not in self.policy_idx or self.policy_shown.get(name) == status:
                continue
            self.policy_shown[name] = dict(status)
            parsed = AcceleratorPolicyStatus.model_validate(status)
            pol = self.policy_idx[name][0]
            self.policy_idx[name] = [pol.model_copy(update={"status": parsed})]
            for s in parsed.spend:
                start = s.period_start or ""
                key = (name, s.team, s.period.value, start)
                self.spend[key] = (max(self.spend.get(key, (0.0, 0.0))[0], s.spent_usd), s.limit_usd)
            changed = True
        if changed:  # handlers.policies: a status change re-decides the waiting jobs against the budgets
            self.sched.policies_changed()
            self.sched.capacity_changed()
        self.cost_series.append((round(self.t / 3600.0, 3), round(self.spent_total, 2)))


def replay(pools: Sequence[AcceleratorPool], arrivals: Sequence[Arrival], **options: Any) -> Result:
    """Run one replay (:class:`Replay`, with its keywords: seed, strategy, progress, disruptions,
    recorded) to its end: every job ended, or left waiting with nothing left to happen."""
    run = Replay(pools, arrivals, **options)
    with asyncio.Runner(loop_factory=InlineLoop) as runner:
        runner.run(run.run())
    assert run.result is not None
    return run.result
