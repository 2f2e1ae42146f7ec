"""What the operator knows of the cluster at one moment, as frozen values.

The handlers fold what kopf's watches deliver (pools, accelerator nodes, the pods on them, the
workloads the operator owns, the AcceleratorJobs) into these values; every decision is a pure
function of one :class:`Snapshot`. Nothing here reads the cluster.

Capacity follows the issue's definition: a pool's free devices are the allocatable devices of its
Ready, schedulable nodes without a termination taint, minus the requests of every pod bound there
(ours or not, unless it has ended), minus what admitted jobs reserved and have not bound yet. Where
a node's agent wrote a fresh report, the devices that something Kubernetes does not know of uses
(a process no pod owns, memory held with no pod: :mod:`node_capacity`) are not free either, and a
gang that needs more memory per device than the report shows free on the node's clean devices
does not fit there; a node without a fresh report is counted from Kubernetes' view alone.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from accel_api.enums import JobPhase, PoolScaling
from accel_api.job import AcceleratorJobSpec, AcceleratorJobStatus
from accel_api.pool import AcceleratorPoolSpec
from accel_operator.planning.candidates import Plan
from accel_operator.reconcile.common.policy_inputs import PolicyInputs
from accel_operator.reconcile.common.reports import ReportView

JobKey = tuple[str, str]  # (namespace, name)

# Phases in which a job holds (or is about to hold) devices.
HOLDING = frozenset({JobPhase.ADMITTED, JobPhase.RUNNING})
TERMINAL = frozenset({JobPhase.SUCCEEDED, JobPhase.FAILED})
# Phases that hold nothing and wait for nothing: decided again only when the job itself changes.
AT_REST = TERMINAL | {JobPhase.STOPPED}


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    labels: Mapping[str, str]
    devices: int  # allocatable nvidia.com/gpu or google.com/tpu
    ready: bool = True
    unschedulable: bool = False  # cordoned
    terminating: bool = False  # carries a termination taint (spot notice, Karpenter disruption)
    deleting: bool = False
    health_taint: bool = False  # carries the operator's device-unhealthy taint
    condemned: bool = False  # a fresh node report shows a failing device (reconcile/nodes/health.py)
    uid: str = ""  # one incarnation of the node: a node re-created under the same name is another
    provider_id: str = ""  # spec.providerID: aws:///<zone>/<instance-id>, gce://<project>/<zone>/<name>
    termination_taints: frozenset[str] = frozenset()  # which of vocabulary.TERMINATION_TAINTS it carries
    capacity_devices: int | None = None  # status.capacity (allocatable is lower by what the device plugin withholds)
    # From a fresh node report (reconcile/common/node_capacity.py): devices that something Kubernetes does
    # not know of uses (a process no pod owns, memory held with no pod), off its free devices; the
    # free memory (bytes, None when not measured) of each device the report shows clean, largest
    # first. None: no fresh report, Kubernetes' view alone.
    stray_devices: int = 0
    clean_memory: tuple[int | None, ...] | None = None
    sick_devices: int = 0  # devices a fresh report shows failing

    @property
    def usable(self) -> bool:
        return (
            self.ready
            and not self.unschedulable
            and not self.terminating
            and not self.deleting
            and not self.health_taint
            and not self.condemned
        )


@dataclass(frozen=True, slots=True)
class PodView:
    namespace: str
    name: str
    node: str | None
    phase: str
    devices: int
    job: JobKey | None = None  # the AcceleratorJob it belongs to (our label), if any
    attempt: int | None = None
    exit_code: int | None = None  # the main container's, once it terminated
    reason: str | None = None  # status.reason (NodeShutdown, Terminated, Evicted ...)
    disrupted: bool = False  # condition DisruptionTarget=True
    checkpoint_now: str | None = None  # the pod's vocabulary.ANNOTATION_CHECKPOINT_NOW (the last request)
    reported_checkpoint: str | None = None  # accel.dev/last-checkpoint as the job wrote it (clipped, unchecked)
    # When kube-scheduler first found no node for it (PodScheduled=False, Unschedulable): the
    # gang's bind clock (reconcile/job/bind_clock.py). None: bound, or not tried yet.
    unschedulable_since: dt.datetime | None = None
    created: dt.datetime | None = None  # metadata.creationTimestamp (the sweep's grace: reconcile/job/sweep.py)
    # What the pod's own timestamps say of its run, the cost ledger's truth (docs/cost.md, "When an
    # attempt is charged"): status.startTime, and its end: the latest finishedAt of its terminated
    # containers, else, for a pod being deleted, when the deletion was asked for
    # (deletionTimestamp less its grace period). None: not started, not ended.
    started: dt.datetime | None = None
    finished: dt.datetime | None = None
    # metadata.uid: how a node report names a pod whose agent lists no pods (reports.DeviceReport).
    uid: str | None = None
    # It carries vocabulary.FINALIZER_LEDGER: its object stays until the accountant releases it.
    held: bool = False
    pool: str | None = None  # our pods' accel.dev/pool label (the pool's name, hashed past 63 characters)

    @property
    def ended(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class Admission:
    """The admission an attempt's batch Job carries in its ``accel.dev/admission`` annotation,
    written with the Job before the job's status says Admitted (the Job is the admission's first
    record): where, how large, when, and the plan's figures a restarted operator adopts it with."""

    attempt: int
    pool: str
    devices: int
    nodes: int
    admitted_time: str  # as the status writes it (RFC 3339, seconds)
    accelerator: str = ""
    capacity_type: str = ""
    duration_seconds: float | None = None
    cost_usd: float | None = None

    @property
    def per_node(self) -> int:
        return self.devices // max(1, self.nodes)


@dataclass(frozen=True, slots=True)
class WorkloadView:
    """A batch/v1 Job the operator made for one attempt of one AcceleratorJob."""

    namespace: str
    name: str
    job: JobKey
    attempt: int
    active: int = 0
    ready: int = 0
    succeeded: int = 0
    failed: int = 0
    complete: bool = False
    failed_condition: bool = False
    failure_reason: str | None = None  # the Job's Failed condition: reason and message
    failure_message: str | None = None
    start_time: dt.datetime | None = None  # status.startTime
    end_time: dt.datetime | None = None  # status.completionTime, else its Complete/Failed condition's time
    # The controller owner's uid (the AcceleratorJob's; None once the garbage collector orphaned it)
    # and metadata.creationTimestamp: what the sweep (reconcile/job/sweep.py) tells a stray by.
    owner_uid: str | None = None
    created: dt.datetime | None = None
    admission: Admission | None = None  # its accel.dev/admission annotation (None: absent or unreadable)

    @property
    def running(self) -> bool:
        """Whether it may still have pods at work (neither complete nor failed)."""
        return not (self.complete or self.failed_condition)


@dataclass(frozen=True, slots=True)
class PoolView:
    name: str
    spec: AcceleratorPoolSpec
    # The selector's pairs, built once with the view: ``owns`` runs for every node of every pool
    # each time a snapshot is folded.
    _match: tuple[tuple[str, str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        from accel_api import vocabulary

        pairs = self.spec.node_selector or {vocabulary.LABEL_POOL: self.name}
        object.__setattr__(self, "_match", tuple(pairs.items()))

    @property
    def selector(self) -> Mapping[str, str]:
        """The labels that put a node in this pool (the pool's nodeSelector, else our pool label)."""
        return MappingProxyType(dict(self._match))

    def owns(self, node: NodeView) -> bool:
        return all(node.labels.get(k) == v for k, v in self._match)

    @property
    def autoscaled(self) -> bool:
        return self.spec.scaling is PoolScaling.AUTOSCALED


@dataclass(frozen=True, slots=True)
class JobView:
    namespace: str
    name: str
    uid: str
    created: dt.datetime
    generation: int | None
    spec: AcceleratorJobSpec | None
    spec_problems: tuple[str, ...]  # why the spec is invalid (field paths); empty when valid
    status: AcceleratorJobStatus
    deleting: bool = False
    resource_version: str | None = None
    # A digest of the accel.dev/resume annotation (a user's request to resume a Stopped job); None: unset.
    resume_request: str | None = None
    # A digest of the accel.dev/stop annotation (a user's request to stop the job); None: unset.
    stop_request: str | None = None
    # The stored spec's team when the spec does not parse but its team does (a DNS label); else "".
    spec_team: str = ""

    @property
    def stop_requested(self) -> bool:
        """Whether a user set ``accel.dev/stop`` to a value the job was not stopped with
        (reconcile/job/user_stop.py)."""
        seen = self.status.health.stop_seen if self.status.health is not None else None
        return self.stop_request is not None and self.stop_request != seen

    @property
    def key(self) -> JobKey:
        return (self.namespace, self.name)

    @property
    def team(self) -> str:
        """The team the job is charged to: its spec's; for a spec that stopped parsing, the one its
        ledger recorded on its attempts (the operator's own record), else the stored spec's own
        team field if that alone is valid; "" when none is known."""
        if self.spec is not None:
            return self.spec.team
        cost = self.status.cost
        for attempt in reversed(cost.attempts if cost is not None else ()):
            if attempt.team:
                return attempt.team
        return self.spec_team

    @property
    def phase(self) -> JobPhase | None:
        return self.status.phase

    @property
    def priority(self) -> int:
        return self.spec.priority if self.spec is not None else 0

    def queue_order(self) -> tuple[int, dt.datetime, str, str]:
        """Admission order: higher priority first, then earlier submission, then name."""
        return (-self.priority, self.created, self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class Reservation:
    """Devices an admitted job holds in a pool, as a gang of ``nodes`` × ``per_node``."""

    job: JobKey
    pool: str
    nodes: int
    per_node: int
    bound_nodes: int = 0  # pods of its current attempt already bound to a node
    expected_end: dt.datetime | None = None

    @property
    def devices(self) -> int:
        return self.nodes * self.per_node

    @property
    def unbound_nodes(self) -> int:
        return max(0, self.nodes - self.bound_nodes)


@dataclass(frozen=True, slots=True)
class Gang:
    nodes: int
    per_node: int
    memory_bytes: int = 0  # per device, as the planner estimates it (0: not known)

    @property
    def devices(self) -> int:
        return self.nodes * self.per_node


@dataclass(frozen=True, slots=True)
class PoolCapacity:
    """One pool now: the free devices of each usable node (after bound pods and reservations)."""

    pool: PoolView
    node_free: tuple[int, ...]  # per usable node (virtual empty nodes of an autoscaled pool included)
    total_nodes: int
    usable_nodes: int
    allocated: int  # devices requested by pods bound to usable nodes
    reserved: int  # devices admitted jobs reserved but have not bound yet
    # Aligned with node_free: the free memory of each free device a fresh report shows, largest
    # first (UNMEASURED when not measured); None for a node counted from Kubernetes' view alone.
    node_memory: tuple[tuple[int, ...] | None, ...] = ()
    unreported_nodes: int = 0  # usable nodes without a fresh report (Kubernetes' view)

    @property
    def free_devices(self) -> int:
        return sum(self.node_free)

    @property
    def whole_free_nodes(self) -> int:
        return sum(1 for f in self.node_free if f >= self.pool.spec.devices_per_node)

    def _memory(self, i: int) -> tuple[int, ...] | None:
        return self.node_memory[i] if i < len(self.node_memory) else None

    def holds(self, i: int, gang: Gang) -> bool:
        """Whether node ``i`` has ``gang.per_node`` free devices, each with the gang's memory free
        (a free device the report does not list, e.g. one a pod left since, is not refused)."""
        free = self.node_free[i]
        if free < gang.per_node:
            return False
        memory = self._memory(i)
        if memory is None or gang.memory_bytes <= 0:
            return True
        unlisted = max(0, free - len(memory))
        return sum(1 for m in memory if m >= gang.memory_bytes) + unlisted >= gang.per_node

    def fits(self, gang: Gang) -> bool:
        """Whether all of ``gang`` can be placed now, each of its pods on its own node (counted
        until enough nodes hold it: a decision reads this for each shape it weighs)."""
        need = gang.nodes
        if need <= 0:
            return True
        found = 0
        if gang.memory_bytes <= 0 or not self.node_memory:  # no memory to check: the free count alone
            per_node = gang.per_node
            for free in self.node_free:
                if free >= per_node:
                    found += 1
                    if found >= need:
                        return True
            return False
        for i in range(len(self.node_free)):
            if self.holds(i, gang):
                found += 1
                if found >= need:
                    return True
        return False

    def take(self, gang: Gang) -> PoolCapacity:
        """This capacity after ``gang`` is placed (best fit: the fullest nodes that still fit)."""
        order = sorted(range(len(self.node_free)), key=self.node_free.__getitem__)
        free, memory = list(self.node_free), [self._memory(i) for i in range(len(self.node_free))]
        left = gang.nodes
        for i in order:
            if left and self.holds(i, gang):
                free[i] -= gang.per_node
                memory[i] = _trim(memory[i], free[i])
                left -= 1
        node_memory = tuple(memory) if self.node_memory else ()
        return replace(self, node_free=tuple(free), node_memory=node_memory, reserved=self.reserved + gang.devices)


UNMEASURED = 1 << 62  # a free device whose memory the report does not give: no reason to refuse


def _trim(memory: tuple[int, ...] | None, free: int) -> tuple[int, ...] | None:
    """The listed free memory (largest first) of a node left with ``free`` devices: which devices
    the device plugin hands out is not ours to choose, so unlisted ones go first, then the largest
    (what is left is the worst case for the next gang)."""
    if memory is None:
        return None
    memory = tuple(sorted(memory, reverse=True))
    return memory[max(0, len(memory) - free) :]


def _place(
    node_free: list[int], gangs: Iterable[tuple[int, int]], memory: list[tuple[int, ...] | None] | None = None
) -> list[int]:
    """Subtract reservations (nodes, per_node) from per-node free devices, best fit (and from
    ``memory``, the free devices' memory aligned with ``node_free``, in place).

    Each pod of a gang goes to the fitting node with the fewest free devices (the first of
    equals), the largest pods first. That node then has fewer free devices than any other, so it
    takes the next pod of the same size too, until it no longer fits: the pods of one size fill
    the fitting nodes in (free devices, index) order, walked once (O(nodes log nodes) a size)
    instead of a scan of every node per pod (a pool's capacity is folded on most passes, and in a
    burst its unbound reservations are hundreds). A node's memory is trimmed once, to what is left
    on it: trimming to ``a`` then to ``b`` <= ``a`` keeps the same ``b`` smallest entries."""
    units: dict[int, int] = {}
    for nodes, per_node in gangs:
        if nodes > 0:
            units[per_node] = units.get(per_node, 0) + nodes
    for per_node in sorted(units, reverse=True):
        left = units[per_node]
        if per_node > 0:
            for free, at in sorted((f, n) for n, f in enumerate(node_free) if f >= per_node):
                if not left:
                    break
                taken = min(left, free // per_node)
                node_free[at] = free - taken * per_node
                left -= taken
                if memory is not None:
                    memory[at] = _trim(memory[at], node_free[at])
        for _ in range(left):  # over-committed (no node fits any more), or pods of no devices
            fitting = [i for i, f in enumerate(node_free) if f >= per_node]
            if not fitting:
                # Over-committed (a reservation outlived its capacity): take what is left.
                i = max(range(len(node_free)), key=node_free.__getitem__, default=None)
                if i is None:
                    break
                node_free[i] = 0
                if memory is not None:
                    memory[i] = _trim(memory[i], 0)
                continue
            i = min(fitting, key=node_free.__getitem__)
            node_free[i] -= per_node
            if memory is not None:
                memory[i] = _trim(memory[i], node_free[i])
    return node_free


# What one node gives its pool's capacity before reservations: (devices its bound, running pods
# use, devices free, the free devices' memory as PoolCapacity.node_memory has it); None for a node
# that is not usable (it counts in the pool's nodes, not in what is free).
NodeEntry = tuple[int, int, tuple[int, ...] | None]


def node_entry(node: NodeView, used: int) -> NodeEntry | None:
    """``node``'s part of its pool's capacity when its bound, running pods use ``used`` devices."""
    if not node.usable:
        return None
    k8s_free = max(0, node.devices - used)
    if node.clean_memory is None:
        return (used, k8s_free, None)
    # What Kubernetes counts free, less what the agent sees used by something Kubernetes does
    # not know of. A device the report attributes to a pod is Kubernetes' to count (a pod
    # that ended a moment ago is free there before the agent's next report says so).
    left = max(0, k8s_free - node.stray_devices)
    return (used, left, _trim(tuple(UNMEASURED if m is None else m for m in node.clean_memory), left))


def pool_capacity(
    pool: PoolView,
    nodes: Iterable[NodeView],
    used_by_node: Mapping[str, int],
    reservations: Iterable[Reservation],
) -> PoolCapacity:
    mine = [n for n in nodes if pool.owns(n)]
    return capacity_of(pool, [node_entry(n, used_by_node.get(n.name, 0)) for n in mine], reservations)


def capacity_of(
    pool: PoolView, entries: Collection[NodeEntry | None], reservations: Iterable[Reservation]
) -> PoolCapacity:
    """The pool's capacity from the entries of its nodes (:func:`node_entry`, in the pool's order)
    and the reservations: what :func:`pool_capacity` folds, for a caller that keeps each node's
    entry between calls (engine/cache.py: recomputed only where a node or its pods changed)."""
    usable = [e for e in entries if e is not None]
    allocated = sum(e[0] for e in usable)
    free = [e[1] for e in usable]
    memory = [e[2] for e in usable]
    unreported = memory.count(None)
    if pool.autoscaled:
        # Nodes the autoscaler will bring for pending pods, up to maxNodes.
        extra = max(0, pool.spec.max_nodes - len(entries))
        free += [pool.spec.devices_per_node] * extra
        memory += [None] * extra
    gangs = [(r.unbound_nodes, r.per_node) for r in reservations if r.pool == pool.name and r.unbound_nodes]
    reserved = sum(n * p for n, p in gangs)
    reported = unreported < len(usable)  # some usable node's memory is listed (the extra nodes' never is)
    return PoolCapacity(
        pool=pool,
        node_free=tuple(_place(free, gangs, memory)),
        total_nodes=len(entries),
        usable_nodes=len(usable),
        allocated=allocated,
        reserved=reserved,
        node_memory=tuple(memory) if reported else (),
        unreported_nodes=unreported,
    )


@dataclass(frozen=True, slots=True)
class Blocked:
    """The first job in queue order that waits for a pool: later jobs may only backfill around it."""

    job: JobKey
    gang: Gang
    shadow: dt.datetime | None  # when enough devices free up for it (running jobs' expected ends)
    extra: int  # devices free at that time beyond what it needs


class _Layered(Mapping[JobKey, Reservation]):
    """The reservations of a snapshot plus those admitted since in the same pass. The views of one
    pass share one append-only log of what it added, each seeing its first ``_n`` entries, so an
    admission costs O(1) instead of copying what the pass added before (quadratic in a burst).
    Adding onto a view that is not the log's newest (a branch), or a key already added, copies
    the view's entries into a new log, so no older view ever sees a later admission."""

    __slots__ = ("_base", "_by_pool", "_log", "_n")

    def __init__(
        self,
        base: Mapping[JobKey, Reservation],
        log: dict[JobKey, tuple[int, Reservation]],
        n: int,
        by_pool: dict[str, list[tuple[int, JobKey]]],
    ) -> None:
        self._base = base
        self._log = log  # key -> (position, reservation), positions 0..len-1 in insertion order
        self._n = n
        # pool -> [(position, key)] of the log (shared with it): a pool's added reservations
        # without a scan of everything the pass admitted (decide.blocked_for, per waiting head).
        self._by_pool = by_pool

    @classmethod
    def on(cls, under: Mapping[JobKey, Reservation], key: JobKey, r: Reservation) -> _Layered:
        if not isinstance(under, _Layered):
            return cls(under, {key: (0, r)}, 1, {r.pool: [(0, key)]})
        log, by_pool = under._log, under._by_pool
        if len(log) != under._n or key in log:  # a branch, or a key the log holds: copy what it sees
            kept = [(k, v) for k, v in under._added_items() if k != key]
            log = {k: (i, v) for i, (k, v) in enumerate(kept)}
            by_pool = {}
            for i, (k, v) in enumerate(kept):
                by_pool.setdefault(v.pool, []).append((i, k))
        by_pool.setdefault(r.pool, []).append((len(log), key))
        log[key] = (len(log), r)
        return cls(under._base, log, len(log), by_pool)

    def added_in(self, pool: str) -> Iterator[tuple[JobKey, Reservation]]:
        """The reservations this view adds in ``pool``."""
        for pos, key in self._by_pool.get(pool, ()):
            if pos < self._n:
                yield key, self._log[key][1]

    def _added_items(self) -> Iterator[tuple[JobKey, Reservation]]:
        for k, (pos, v) in self._log.items():
            if pos < self._n:
                yield k, v

    def _added(self, key: object) -> Reservation | None:
        hit = self._log.get(key)  # type: ignore[call-overload]
        return hit[1] if hit is not None and hit[0] < self._n else None

    def __getitem__(self, key: JobKey) -> Reservation:
        r = self._added(key)
        return r if r is not None else self._base[key]

    def __contains__(self, key: object) -> bool:
        return self._added(key) is not None or key in self._base

    def __iter__(self) -> Iterator[JobKey]:
        yield from (k for k in self._base if self._added(k) is None)
        yield from (k for k, _v in self._added_items())

    def __len__(self) -> int:
        return len(self._base) + sum(1 for k, _v in self._added_items() if k not in self._base)


@dataclass(frozen=True)
class Snapshot:
    now: dt.datetime
    pools: Mapping[str, PoolView]
    capacity: Mapping[str, PoolCapacity]
    jobs: Mapping[JobKey, JobView]
    workloads: Mapping[tuple[str, str], WorkloadView]  # by (namespace, name)
    pods_by_job: Mapping[JobKey, tuple[PodView, ...]]
    reservations: Mapping[JobKey, Reservation]
    plans: Mapping[JobKey, Plan] = field(default_factory=lambda: MappingProxyType({}))
    blocked: Mapping[str, Blocked] = field(default_factory=lambda: MappingProxyType({}))
    policy: PolicyInputs = field(default_factory=PolicyInputs)  # policies, namespace teams, spend
    # What the node agents report (reconcile/nodes/health.py decides on them), and the nodes by name.
    reports: Mapping[str, ReportView] = field(default_factory=lambda: MappingProxyType({}))
    nodes: Mapping[str, NodeView] = field(default_factory=lambda: MappingProxyType({}))
    node_used: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))  # devices pods hold
    # Nodes a cloud API reports as preempted (TPU VMs outside GKE: state PREEMPTED): an attempt
    # whose pods ended there was preempted, whatever their exit codes say.
    preempted_nodes: frozenset[str] = frozenset()
    # Indexes the engine's folded picture keeps (engine/cache.py), so that a waiting gang's
    # consolidation looks at its pool and its own moves instead of every job and node of the
    # cluster; None where a snapshot is made without them (every job or node is looked at then).
    # pool -> the names of the nodes it owns; pool -> the jobs holding a reservation there;
    # gang -> the jobs whose status carries a consolidation marker made for it.
    pool_nodes: Mapping[str, frozenset[str]] | None = None
    holders: Mapping[str, frozenset[JobKey]] | None = None
    markers: Mapping[JobKey, frozenset[JobKey]] | None = None

    def with_admission(self, key: JobKey, pool: str, gang: Gang, expected_end: dt.datetime | None) -> Snapshot:
        cap = dict(self.capacity)
        cap[pool] = cap[pool].take(gang)
        added = Reservation(key, pool, gang.nodes, gang.per_node, 0, expected_end)
        return replace(self, capacity=MappingProxyType(cap), reservations=_Layered.on(self.reservations, key, added))

    def nodes_in(self, pool: str) -> Iterable[NodeView]:
        """The nodes that may belong to ``pool``: those the pool-nodes index names when the snapshot
        keeps one (O(the pool's nodes)), else every node; the caller still asks ``PoolView.owns``."""
        if self.pool_nodes is None:
            return self.nodes.values()
        return [n for name in self.pool_nodes.get(pool, ()) if (n := self.nodes.get(name)) is not None]

    def reservations_in(self, pool: str) -> list[Reservation]:
        """The reservations held in ``pool``, this pass's admissions included: by the holders
        index and the pass's log when the snapshot has them (O(what the pool holds)), else a scan."""
        res = self.reservations
        if self.holders is None:
            return [r for r in res.values() if r.pool == pool]
        held = self.holders.get(pool, frozenset())
        out = [r for k in held if (r := res.get(k)) is not None and r.pool == pool]
        if isinstance(res, _Layered):
            out.extend(r for k, r in res.added_in(pool) if k not in held)
        return out

    def with_blocked(self, pool: str, blocked: Blocked) -> Snapshot:
        if pool in self.blocked:
            return self
        b = dict(self.blocked)
        b[pool] = blocked
        return replace(self, blocked=MappingProxyType(b))
