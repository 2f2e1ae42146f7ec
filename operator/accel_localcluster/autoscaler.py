"""The simulated autoscaler: KWOK nodes appear for an autoscaled pool's pending pods and go when idle.

What Karpenter or the cluster autoscaler does for a real pool, reduced to what the operator's
autoscaled path needs in tests and the demo. Each ``step`` observes (pools, nodes, non-terminal
pods through a ``ClusterPort``), decides with the pure ``decide`` and applies the actions.

The rules of one step:

- Pools: AcceleratorPools with ``spec.scaling: autoscaled``. A pool's nodes are those whose
  labels match ``spec.nodeSelector`` when it is non-empty, else those labelled
  ``accel.dev/pool=<name>`` (what ``nodes.node_manifests`` puts on every node it makes).
- A pod waits on a pool when it is Pending, bound to no node, not being deleted, and its
  ``nodeSelector`` contains the pool's selector (the first such pool by name, when several
  match). Its wait is counted from when this autoscaler first saw it so (the injected clock);
  the scheduler's ``PodScheduled=False/Unschedulable`` is not required, as a pod unbound for
  ``scale_up_delay`` is just as much in want of a node.
- Sizing, in whole devices of the pool's resource (``nvidia.com/gpu`` or ``google.com/tpu``),
  first fit, pods in the order they started waiting: a waiting pod is placed in the free devices
  of a pool node that can take it (allocatable minus the requests of its non-terminal pods; a
  node created a moment ago is all free, so a pod never gets a second node while the scheduler
  binds it to the first), else in a node opened earlier in this step, else (once it has waited
  ``scale_up_delay``) it opens a new node, as long as the pool stays within ``maxNodes`` (every
  pool node counts, whoever made it). So a gang of 8-GPU pods on 8-GPU nodes gets a node each,
  four 2-GPU pods share one.
- A pod a new node of the pool could never take (a device request above ``devicesPerNode`` or
  of the other kind of device, a selector label the node would lack, a taint it does not
  tolerate) opens nothing and is reported in ``Actions.unfit``.
- Scale down: only nodes annotated ``accel.dev/autoscaled=true`` (made here) are ever removed,
  once they have had no non-terminal pod, and no waiting pod placed on them, for
  ``idle_seconds``. The Kubernetes port looks again for pods on the node just before it deletes.

Left out on purpose: node affinity, pod (anti-)affinity and topology spread (only
``nodeSelector`` and tolerations are read), CPU and memory (simulated nodes have plenty), and
memory across restarts (a restarted autoscaler waits ``scale_up_delay`` and ``idle_seconds``
afresh).
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from accel_api import registry
from accel_api import vocabulary as v
from accel_api.enums import PoolScaling
from accel_api.pool import AcceleratorPoolSpec
from accel_localcluster import kubeapi, nodes

log = logging.getLogger(__name__)

DEVICE_RESOURCES = (v.RESOURCE_NVIDIA_GPU, v.RESOURCE_GOOGLE_TPU)
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
# Taints the node lifecycle controller puts on a node for a moment after it appears: a node we
# just made must still count as room for the pods it was made for.
TRANSIENT_TAINTS = frozenset({v.TAINT_NOT_READY, v.TAINT_UNREACHABLE})
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
HOSTNAME_LABEL = "kubernetes.io/hostname"
API_TIMEOUT_SECONDS = 10.0


# --- what a step reads ---------------------------------------------------------------------
@dataclass(frozen=True)
class Pool:
    name: str
    spec: AcceleratorPoolSpec
    selector: Mapping[str, str]  # what selects the pool's nodes
    resource: str  # the device resource its nodes offer
    new_labels: Mapping[str, str]  # labels of a node this pool would get (no hostname)
    new_taints: tuple[Mapping[str, str], ...]


@dataclass(frozen=True)
class Node:
    name: str
    labels: Mapping[str, str]
    taints: tuple[Mapping[str, str], ...]
    devices: Mapping[str, int]  # allocatable device resources
    autoscaled: bool  # made by this autoscaler
    schedulable: bool  # not cordoned, not being deleted


@dataclass(frozen=True)
class Pod:
    key: str  # namespace/name
    node_name: str | None
    phase: str
    selector: Mapping[str, str]
    tolerations: tuple[Mapping[str, Any], ...]
    devices: Mapping[str, int]  # requested device resources (effective, init containers included)
    deleting: bool

    @property
    def waiting(self) -> bool:
        return self.phase == "Pending" and not self.node_name and not self.deleting


@dataclass(frozen=True)
class Snapshot:
    pools: tuple[Pool, ...]
    nodes: tuple[Node, ...]
    pods: tuple[Pod, ...]  # non-terminal ones
    problems: tuple[str, ...] = ()  # pools that could not be read

    @classmethod
    def from_objects(
        cls,
        pools: Sequence[Mapping[str, Any]],
        node_objs: Sequence[Mapping[str, Any]],
        pods: Sequence[Mapping[str, Any]],
    ) -> Snapshot:
        """Kubernetes objects as JSON dicts (camelCase, as the API server sends them) in."""
        read: list[Pool] = []
        problems: list[str] = []
        for obj in pools:
            name = str(obj.get("metadata", {}).get("name", ""))
            try:
                pool = _pool(name, obj.get("spec") or {})
            except (ValidationError, ValueError) as exc:
                problems.append(f"pool {name}: cannot be read ({str(exc).splitlines()[0]})")
                continue
            if pool is not None:
                read.append(pool)
        return cls(
            pools=tuple(sorted(read, key=lambda p: p.name)),
            nodes=tuple(_node(n) for n in node_objs),
            pods=tuple(p for p in (_pod(o) for o in pods) if p.phase not in TERMINAL_PHASES),
            problems=tuple(problems),
        )


def _pool(name: str, raw: Mapping[str, Any]) -> Pool | None:
    spec = AcceleratorPoolSpec.model_validate(raw)
    if spec.scaling is not PoolScaling.AUTOSCALED:
        return None
    template = nodes.node_manifests(name, spec, count=1)[0]  # ValueError: not in the catalog
    labels = {k: val for k, val in template["metadata"]["labels"].items() if k != HOSTNAME_LABEL}
    resource = next(r for r in DEVICE_RESOURCES if r in template["status"]["allocatable"])
    return Pool(
        name=name,
        spec=spec,
        selector=dict(spec.node_selector) or {v.LABEL_POOL: name},
        resource=resource,
        new_labels=labels,
        new_taints=tuple(template["spec"]["taints"]),
    )


def _quantity(raw: Any) -> int:
    """Device counts are whole numbers (the API server refuses fractions of extended resources)."""
    try:
        return int(str(raw))
    except ValueError:
        return 0


def _node(obj: Mapping[str, Any]) -> Node:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    allocatable = (obj.get("status") or {}).get("allocatable") or {}
    return Node(
        name=str(meta.get("name", "")),
        labels=dict(meta.get("labels") or {}),
        taints=tuple(spec.get("taints") or ()),
        devices={r: _quantity(allocatable[r]) for r in DEVICE_RESOURCES if r in allocatable},
        autoscaled=(meta.get("annotations") or {}).get(v.ANNOTATION_AUTOSCALED) == "true",
        schedulable=not spec.get("unschedulable") and not meta.get("deletionTimestamp"),
    )


def _requests(containers: Sequence[Mapping[str, Any]]) -> list[dict[str, int]]:
    out = []
    for c in containers:
        res = c.get("resources") or {}
        # Extended resources: a limit alone implies the same request.
        asked = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        out.append({r: _quantity(asked[r]) for r in DEVICE_RESOURCES if r in asked})
    return out


def _pod(obj: Mapping[str, Any]) -> Pod:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    main = _requests(spec.get("containers") or ())
    init = _requests(spec.get("initContainers") or ())
    devices = {
        r: max(sum(c.get(r, 0) for c in main), max((c.get(r, 0) for c in init), default=0)) for r in DEVICE_RESOURCES
    }
    return Pod(
        key=f"{meta.get('namespace', '')}/{meta.get('name', '')}",
        node_name=spec.get("nodeName") or None,
        phase=str((obj.get("status") or {}).get("phase") or "Pending"),
        selector=dict(spec.get("nodeSelector") or {}),
        tolerations=tuple(spec.get("tolerations") or ()),
        devices={r: n for r, n in devices.items() if n},
        deleting=bool(meta.get("deletionTimestamp")),
    )


# --- the decision --------------------------------------------------------------------------
def tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Kubernetes' toleration matching: an empty key with Exists tolerates everything."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        exists = t.get("operator", "Equal") == "Exists"
        if not t.get("key"):
            if exists:
                return True
            continue
        if t["key"] == taint.get("key") and (exists or (t.get("value") or "") == (taint.get("value") or "")):
            return True
    return False


def _admits(pod: Pod, labels: Mapping[str, str], taints: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a node with these labels and taints may run ``pod`` (selector and tolerations)."""
    if any(labels.get(k) != val for k, val in pod.selector.items()):
        return False
    blocking = (t for t in taints if t.get("effect") in BLOCKING_EFFECTS and t.get("key") not in TRANSIENT_TAINTS)
    return all(tolerates(pod.tolerations, t) for t in blocking)


def _why_unfit(pod: Pod, pool: Pool) -> str | None:
    other = sorted(r for r in pod.devices if r != pool.resource)
    if other:
        return f"requests {', '.join(other)}, which {pool.name}'s nodes do not offer"
    if pod.devices.get(pool.resource, 0) > pool.spec.devices_per_node:
        return (
            f"requests {pod.devices[pool.resource]} {pool.resource}, more than a node of {pool.name} has "
            f"({pool.spec.devices_per_node})"
        )
    if not _admits(pod, pool.new_labels, pool.new_taints):
        return f"a new node of {pool.name} would not take it (nodeSelector or tolerations)"
    return None


@dataclass(frozen=True)
class Memory:
    """What a step remembers for the next: when each pod started waiting, when each of our nodes
    fell idle, and each pool's next node index (names are never reused within a run)."""

    waiting_since: Mapping[str, float] = field(default_factory=dict)
    idle_since: Mapping[str, float] = field(default_factory=dict)
    next_index: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class AddNode:
    pool: str
    name: str
    manifest: Mapping[str, Any]
    pods: tuple[str, ...]  # the waiting pods it is for

    def __str__(self) -> str:
        return f"pool {self.pool}: add node {self.name} for {', '.join(self.pods)}"


@dataclass(frozen=True)
class RemoveNode:
    name: str
    idle_seconds: float

    def __str__(self) -> str:
        return f"remove node {self.name}: idle for {self.idle_seconds:.1f}s"


@dataclass(frozen=True)
class Actions:
    add: tuple[AddNode, ...] = ()
    remove: tuple[RemoveNode, ...] = ()
    unfit: tuple[str, ...] = ()  # waiting pods no new node could take, and why
    capped: tuple[str, ...] = ()  # waiting pods left without a node by maxNodes
    memory: Memory = field(default_factory=Memory)


@dataclass
class _Opening:
    """A node opened in this step: its devices still free and the pods placed on it."""

    free: int
    pods: list[str] = field(default_factory=list)


def _index(name: str, pool: str) -> int | None:
    m = re.fullmatch(re.escape(pool) + r"-(\d+)", name)
    return int(m.group(1)) if m else None


def decide(snap: Snapshot, memory: Memory, *, now: float, scale_up_delay: float, idle_seconds: float) -> Actions:
    """The nodes to add and remove now (the module docstring has the rules), and what to remember."""
    waiting_since: dict[str, float] = {}
    next_index = dict(memory.next_index)
    nominated: set[str] = set()
    adds: list[AddNode] = []
    unfit: list[str] = []
    capped: list[str] = []
    used: dict[str, int] = {}  # node -> devices requested by its non-terminal pods (any resource)
    for pod in snap.pods:
        if pod.node_name:
            used[pod.node_name] = used.get(pod.node_name, 0) + sum(pod.devices.values())
    claimed: set[str] = set()  # a pod waits on one pool only
    for pool in snap.pools:
        members = [n for n in snap.nodes if all(n.labels.get(k) == val for k, val in pool.selector.items())]
        free = {n.name: n.devices.get(pool.resource, 0) - used.get(n.name, 0) for n in members}
        waiting = [
            p
            for p in snap.pods
            if p.waiting and p.key not in claimed and all(p.selector.get(k) == val for k, val in pool.selector.items())
        ]
        for p in waiting:
            claimed.add(p.key)
            waiting_since[p.key] = memory.waiting_since.get(p.key, now)
        waiting.sort(key=lambda p: (waiting_since[p.key], p.key))
        opened: list[_Opening] = []
        for pod in waiting:
            need = pod.devices.get(pool.resource, 0)
            home = next(
                (n for n in members if n.schedulable and free[n.name] >= need and _admits(pod, n.labels, n.taints)),
                None,
            )
            if home is not None:
                free[home.name] -= need
                nominated.add(home.name)
                continue
            if now - waiting_since[pod.key] < scale_up_delay:
                continue
            why = _why_unfit(pod, pool)
            if why is not None:
                unfit.append(f"{pod.key}: {why}")
                continue
            slot = next((o for o in opened if o.free >= need), None)
            if slot is None:
                if len(members) + len(opened) >= pool.spec.max_nodes:
                    capped.append(f"{pod.key}: pool {pool.name} is at maxNodes ({pool.spec.max_nodes})")
                    continue
                slot = _Opening(pool.spec.devices_per_node)
                opened.append(slot)
            slot.free -= need
            slot.pods.append(pod.key)
        if opened:
            start = max(
                [next_index.get(pool.name, 0)]
                + [i + 1 for n in snap.nodes if (i := _index(n.name, pool.name)) is not None]
            )
            made = nodes.node_manifests(pool.name, pool.spec, count=len(opened), start=start)
            next_index[pool.name] = start + len(opened)
            for manifest, slot in zip(made, opened, strict=True):
                manifest["metadata"]["annotations"][v.ANNOTATION_AUTOSCALED] = "true"
                adds.append(AddNode(pool.name, manifest["metadata"]["name"], manifest, tuple(slot.pods)))

    idle_since: dict[str, float] = {}
    removes: list[RemoveNode] = []
    busy = {p.node_name for p in snap.pods if p.node_name} | nominated
    for node in snap.nodes:
        if not node.autoscaled or node.name in busy:
            continue
        idle_since[node.name] = since = memory.idle_since.get(node.name, now)
        if now - since >= idle_seconds:
            removes.append(RemoveNode(node.name, now - since))
    return Actions(
        add=tuple(adds),
        remove=tuple(removes),
        unfit=tuple(unfit),
        capped=tuple(capped),
        memory=Memory(waiting_since=waiting_since, idle_since=idle_since, next_index=next_index),
    )


# --- the port to the cluster ---------------------------------------------------------------
class ClusterUnavailable(RuntimeError):
    """The API server refused or could not be reached; the next step tries again."""


class ClusterPort(Protocol):
    def pools(self) -> list[dict[str, Any]]: ...
    def nodes(self) -> list[dict[str, Any]]: ...
    def pods(self) -> list[dict[str, Any]]: ...  # non-terminal ones
    def create_node(self, manifest: Mapping[str, Any]) -> bool: ...  # False: it existed
    def delete_node(self, name: str) -> bool: ...  # False: a pod is on it now; refused


_ACTIVE = "status.phase!=Succeeded,status.phase!=Failed"


class KubeCluster:
    """The port over the Kubernetes API (every call with a timeout; errors as ``ClusterUnavailable``)."""

    def __init__(self, api: client.ApiClient, timeout: float = API_TIMEOUT_SECONDS) -> None:
        self._api = api
        self._core = client.CoreV1Api(api)
        self._custom = client.CustomObjectsApi(api)
        self._timeout = timeout

    @contextlib.contextmanager
    def _calls(self, what: str) -> Iterator[None]:
        try:
            yield
        except ApiException as exc:
            raise ClusterUnavailable(f"{what}: HTTP {exc.status} {exc.reason}") from exc
        except urllib3.exceptions.HTTPError as exc:
            raise ClusterUnavailable(f"{what}: {exc}") from exc

    def _items(self, result: Any) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self._api.sanitize_for_serialization(result).get("items", [])
        return items

    def pools(self) -> list[dict[str, Any]]:
        with self._calls("list AcceleratorPools"), kubeapi.ignoring(404):  # 404: no CRDs yet
            got = self._custom.list_cluster_custom_object(
                v.GROUP, v.VERSION, registry.POOL.plural, _request_timeout=self._timeout
            )
            return list(got.get("items", []))
        return []

    def nodes(self) -> list[dict[str, Any]]:
        with self._calls("list nodes"):
            return self._items(self._core.list_node(_request_timeout=self._timeout))

    def pods(self) -> list[dict[str, Any]]:
        with self._calls("list pods"):
            return self._items(
                self._core.list_pod_for_all_namespaces(field_selector=_ACTIVE, _request_timeout=self._timeout)
            )

    def create_node(self, manifest: Mapping[str, Any]) -> bool:
        with self._calls(f"create node {manifest['metadata']['name']}"), kubeapi.ignoring(409):
            self._core.create_node(dict(manifest), _request_timeout=self._timeout)
            return True
        return False

    def delete_node(self, name: str) -> bool:
        with self._calls(f"delete node {name}"):
            on_it = self._core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={name},{_ACTIVE}", limit=1, _request_timeout=self._timeout
            )
            if on_it.items:
                return False
            with kubeapi.ignoring(404):
                self._core.delete_node(name, _request_timeout=self._timeout)
        return True


class FakeCluster:
    """The port in memory, over plain dicts: records calls and can fail the next one."""

    def __init__(
        self,
        pools: Sequence[dict[str, Any]] = (),
        nodes: Sequence[dict[str, Any]] = (),
        pods: Sequence[dict[str, Any]] = (),
    ) -> None:
        self.pool_objs = list(pools)
        self.node_objs = list(nodes)
        self.pod_objs = list(pods)
        self.calls: list[tuple[str, str]] = []
        self.fail_next: ClusterUnavailable | None = None

    def _call(self, name: str, arg: str = "") -> None:
        self.calls.append((name, arg))
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc

    def pools(self) -> list[dict[str, Any]]:
        self._call("pools")
        return list(self.pool_objs)

    def nodes(self) -> list[dict[str, Any]]:
        self._call("nodes")
        return list(self.node_objs)

    def pods(self) -> list[dict[str, Any]]:
        self._call("pods")
        return [p for p in self.pod_objs if (p.get("status") or {}).get("phase") not in TERMINAL_PHASES]

    def create_node(self, manifest: Mapping[str, Any]) -> bool:
        name = manifest["metadata"]["name"]
        self._call("create_node", name)
        if any(n["metadata"]["name"] == name for n in self.node_objs):
            return False
        self.node_objs.append(dict(manifest))
        return True

    def delete_node(self, name: str) -> bool:
        self._call("delete_node", name)
        if any((p.get("spec") or {}).get("nodeName") == name for p in self.pods()):
            return False
        self.node_objs = [n for n in self.node_objs if n["metadata"]["name"] != name]
        return True


_: ClusterPort = FakeCluster()


# --- the loop ------------------------------------------------------------------------------
class SimulatedAutoscaler:
    """Observe, decide, apply, every ``interval`` seconds (``run``) or once (``step``).

    ``cluster`` is an ApiClient (the Kubernetes port is made from it) or any ``ClusterPort``.
    ``nodes_added`` and ``nodes_removed`` count what it did, for tests; written by the loop's
    thread only."""

    def __init__(
        self,
        cluster: ClusterPort | client.ApiClient,
        *,
        scale_up_delay: float = 2.0,
        idle_seconds: float = 10.0,
        interval: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not interval > 0:
            raise ValueError(f"interval: more than 0 seconds (got {interval})")
        self.cluster: ClusterPort = KubeCluster(cluster) if isinstance(cluster, client.ApiClient) else cluster
        self.scale_up_delay = scale_up_delay
        self.idle_seconds = idle_seconds
        self.interval = interval
        self.clock = clock
        self.memory = Memory()
        self.nodes_added = 0
        self.nodes_removed = 0
        self.error: BaseException | None = None  # what ended ``run`` early, if anything did
        self._told: set[str] = set()  # unfit/capped/problem lines already logged

    def step(self, now: float | None = None) -> Actions:
        """One pass; ``ClusterUnavailable`` when the API server could not be read or written."""
        now = self.clock() if now is None else now
        snap = Snapshot.from_objects(self.cluster.pools(), self.cluster.nodes(), self.cluster.pods())
        actions = decide(snap, self.memory, now=now, scale_up_delay=self.scale_up_delay, idle_seconds=self.idle_seconds)
        self.memory = actions.memory
        for line in (*snap.problems, *actions.unfit, *actions.capped):
            if line not in self._told:
                log.info("autoscaler: %s", line)
        self._told = {*snap.problems, *actions.unfit, *actions.capped}
        for add in actions.add:
            if self.cluster.create_node(add.manifest):
                log.info("autoscaler: %s", add)
                self.nodes_added += 1  # after the log line: a reader that sees the count sees the line
        for rm in actions.remove:
            if self.cluster.delete_node(rm.name):
                log.info("autoscaler: %s", rm)
                self.nodes_removed += 1
            else:
                log.info("autoscaler: kept node %s: a pod was bound to it meanwhile", rm.name)
        return actions

    def run(self, stop: threading.Event) -> None:
        """Step every ``interval`` seconds until ``stop`` is set; an unreachable API server is
        logged and retried. Anything else ends the loop and is kept in ``error``."""
        log.info(
            "autoscaler: started (scale-up delay %.1fs, idle %.1fs, every %.2fs)",
            self.scale_up_delay,
            self.idle_seconds,
            self.interval,
        )
        try:
            while not stop.is_set():
                try:
                    self.step()
                except ClusterUnavailable as exc:
                    log.warning("autoscaler: %s; trying again", exc)
                stop.wait(self.interval)
        except BaseException as exc:
            self.error = exc
            raise
        finally:
            log.info("autoscaler: stopped (%d nodes added, %d removed)", self.nodes_added, self.nodes_removed)


STOP_TIMEOUT_SECONDS = 3 * API_TIMEOUT_SECONDS


@contextlib.contextmanager
def running(cluster: ClusterPort | client.ApiClient, **kwargs: Any) -> Iterator[SimulatedAutoscaler]:
    """A ``SimulatedAutoscaler`` stepping in a daemon thread while the block runs.

    On leaving, the thread is stopped and joined (``STOP_TIMEOUT_SECONDS`` at most: a step's API
    calls each time out); a loop that failed, or did not stop, raises then, unless the block
    itself raised."""
    scaler = SimulatedAutoscaler(cluster, **kwargs)
    stop = threading.Event()
    thread = threading.Thread(target=scaler.run, args=(stop,), name="simulated-autoscaler", daemon=True)
    thread.start()
    try:
        yield scaler
    finally:
        stop.set()
        thread.join(timeout=STOP_TIMEOUT_SECONDS)
    if thread.is_alive():
        raise RuntimeError(f"the simulated autoscaler did not stop within {STOP_TIMEOUT_SECONDS:.0f}s")
    if scaler.error is not None:
        raise RuntimeError("the simulated autoscaler failed") from scaler.error
