"""The world of the scale benchmarks on the local control plane (bench/scale.py with the operator,
bench/ceiling.py without it): the control plane started or reused with the CRDs applied, pools of
KWOK nodes (8 × H100 each by default), the one-H100 job they all create, the figures both read
(CPU seconds of a process, percentiles) and the clean-up at the end.
"""

from __future__ import annotations

import math
import os
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from tests.support.builders import LLAMA_1B

from accel_api import registry
from accel_api import vocabulary as v
from accel_api.pool import AcceleratorPoolSpec
from accel_localcluster import Cluster, default_cluster, kubeapi, nodes, preempt

ROOT = Path(__file__).resolve().parents[1]

JOB_SPEC: dict[str, Any] = {
    "team": "bench",
    "image": "bench/trainer:1",
    "command": ["python", "-m", "trainer"],
    "model": {
        "name": "tinyllama-1.1b",
        "architecture": {**LLAMA_1B, "mlp": "swiglu"},
    },
    "workload": {
        "mode": "training",
        "precision": "amp-bf16",
        "optimizer": "adamw",
        "microBatch": 4,
        "seqLen": 2048,
        "tokens": 200_000_000,
    },
    "objective": "cost",
    "spot": {"policy": "never"},
}


def pool_doc(name: str, node_count: int, devices_per_node: int) -> dict[str, Any]:
    return {
        "apiVersion": v.API_VERSION,
        "kind": "AcceleratorPool",
        "metadata": {"name": name, "labels": {"accel.dev/bench": "scale"}},
        "spec": {
            "provider": "aws",
            "accelerator": "h100-80gb",
            "devicesPerNode": devices_per_node,
            "maxNodes": node_count,
            "tolerations": [{"key": v.TAINT_GPU, "operator": "Exists", "effect": "NoSchedule"}],
        },
    }


def job_doc(namespace: str, name: str, pool: str) -> dict[str, Any]:
    spec = {**JOB_SPEC, "placement": {"acceleratorKinds": ["gpu"], "pools": [pool], "minDevices": 1, "maxDevices": 1}}
    return {
        "apiVersion": v.API_VERSION,
        "kind": "AcceleratorJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def make_pools(
    api_factory: Callable[[], client.ApiClient], pools: list[str], per_pool: int, devices: int, threads: int
) -> list[str]:
    """The pools and their KWOK nodes; nodes are created from ``threads`` threads."""
    api = api_factory()
    manifests: list[dict[str, Any]] = []
    for name in pools:
        doc = pool_doc(name, per_pool, devices)
        kubeapi.apply(api, doc)
        manifests += nodes.node_manifests(name, AcceleratorPoolSpec.model_validate(doc["spec"]), per_pool)
    local = threading.local()

    def create(m: dict[str, Any]) -> str:
        if not hasattr(local, "core"):
            local.core = client.CoreV1Api(api_factory())
        return nodes.ensure_nodes(local.core, [m])[0]

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(create, manifests))


def wait_ready(core: client.CoreV1Api, names: set[str], timeout: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        ready = set()
        for n in core.list_node(label_selector="type=kwok").items:
            if n.metadata.name in names and any(
                c.type == "Ready" and c.status == "True" for c in (n.status.conditions or [])
            ):
                ready.add(n.metadata.name)
        if ready >= names:
            return time.monotonic() - t0
        time.sleep(1.0)
    raise TimeoutError(f"only some of {len(names)} nodes became Ready in {timeout:.0f}s")


@dataclass(frozen=True)
class World:
    """The local control plane a run uses: a healthy one reused, else started (``started``: then
    the run stops it at the end, unless told to keep it), with the CRDs applied."""

    cluster: Cluster
    started: bool
    api: client.ApiClient
    core: client.CoreV1Api

    @property
    def kubeconfig(self) -> Path:
        return self.cluster.kubeconfig

    def new_api(self) -> client.ApiClient:
        """A client of its own (for a thread), with a few pooled connections."""
        api = config.new_client_from_config(config_file=str(self.kubeconfig))
        api.configuration.connection_pool_maxsize = 8
        return api

    def new_namespace(self, prefix: str) -> str:
        """A fresh namespace ``prefix-xxxxxx`` for the run's jobs."""
        namespace = f"{prefix}-{uuid.uuid4().hex[:6]}"
        kubeapi.ensure_namespace(self.api, namespace)
        return namespace


def start() -> World:
    """The local control plane, started unless a healthy one runs, with the CRDs applied."""
    cluster = default_cluster()
    started = not cluster.healthy()
    if started:
        print("starting the local control plane ...", flush=True)
        cluster.up(timeout=300)
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    api.configuration.connection_pool_maxsize = 8
    kubeapi.install_crds(api, ROOT / "crds")
    return World(cluster=cluster, started=started, api=api, core=client.CoreV1Api(api))


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of ``pid`` so far (NaN when it is gone)."""
    if pid is None:
        return math.nan
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], p: float) -> float:
    if not values:
        return math.nan
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(p / 100 * len(s)) - 1))
    return s[k]


def cleanup(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, pools: list[str], *, stop_cluster: bool
) -> None:
    if stop_cluster:
        print("stopping the local control plane ...", flush=True)
        default_cluster().down()
        return
    print("removing the benchmark's namespace, nodes and pools ...", flush=True)
    with kubeapi.ignoring(404):
        core.delete_namespace(namespace, propagation_policy="Background", grace_period_seconds=0)
    release_pods(core, namespace)
    custom = client.CustomObjectsApi(api)
    for pool in pools:
        for n in core.list_node(label_selector=f"{v.LABEL_POOL}={pool}").items:
            preempt.delete_node(core, n.metadata.name)
        with kubeapi.ignoring(404):
            custom.delete_cluster_custom_object(v.GROUP, v.VERSION, registry.POOL.plural, pool)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 180:
        try:
            core.read_namespace(namespace)
        except client.ApiException as exc:
            if exc.status == 404:
                return
            raise
        time.sleep(2.0)
    print(f"namespace {namespace} is still terminating after 180 s", flush=True)


def release_pods(core: client.CoreV1Api, namespace: str, threads: int = 8) -> None:
    """Delete the namespace's pods now: drop the Job controller's tracking finalizer, which a pod
    whose Job and node are gone may keep for minutes, then delete them without grace."""
    with kubeapi.ignoring(404):
        # The answer lists every deleted pod (tens of MB at full size): read and dropped unparsed.
        resp = core.delete_collection_namespaced_pod(
            namespace, grace_period_seconds=0, _preload_content=False, _request_timeout=600
        )
        resp.read()
    with kubeapi.ignoring(404):
        pods = [p.metadata.name for p in core.list_namespaced_pod(namespace).items if p.metadata.finalizers]

    def release(name: str) -> None:
        with kubeapi.ignoring(404):
            core.patch_namespaced_pod(name, namespace, {"metadata": {"finalizers": None}})

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(release, pods))


class NamespaceWatch:
    """Lists one kind in a namespace, then watches it from a thread (listing again on 410 Gone,
    watching again after a dropped connection), handing each object to :meth:`record` with the
    monotonic time it arrived and its event type (``ADDED`` for a listed one)."""

    def __init__(
        self, list_fn: Callable[..., Any], namespace: str, *, thread: str, bookmarks: bool = False, **query: Any
    ) -> None:
        self._list = list_fn
        self.namespace = namespace
        self._query = query  # for the list and the watch (a label selector)
        self._watch_query = {**query, "allow_watch_bookmarks": True} if bookmarks else query
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=thread, daemon=True)
        self.errors = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)

    def record(self, obj: Any, now: float, event: str) -> None:
        raise NotImplementedError

    def _loop(self) -> None:
        rv: str | None = None
        while not self._stop.is_set():
            try:
                if rv is None:
                    listed = self._list(self.namespace, **self._query)
                    now = time.monotonic()
                    for obj in listed.items:
                        self.record(obj, now, "ADDED")
                    rv = listed.metadata.resource_version
                w = watch.Watch()
                for event in w.stream(
                    self._list, self.namespace, resource_version=rv, timeout_seconds=5, **self._watch_query
                ):
                    now = time.monotonic()
                    obj = event["object"]
                    rv = obj.metadata.resource_version
                    self.record(obj, now, event["type"])
                    if self._stop.is_set():
                        w.stop()
                        break
            except client.ApiException as exc:
                self.errors += 1
                if exc.status == 410:
                    rv = None  # expired: list again (arrival times of missed ones are later than real)
                time.sleep(0.2)
            except Exception:  # noqa: BLE001 - a dropped connection: watch again
                self.errors += 1
                time.sleep(0.2)
