"""The simulated autoscaler's decisions, over plain dicts (the JSON the API server sends) and a
fake cluster: how many nodes pending pods get, the maxNodes cap, idle removal, and the nodes it
must never remove."""

import threading
import time
from typing import Any

import pytest

from accel_api import vocabulary as v
from accel_api.pool import AcceleratorPoolSpec
from accel_localcluster import autoscaler, nodes

GPU_TOLERATION = {"key": v.TAINT_GPU, "operator": "Exists", "effect": "NoSchedule"}
DELAY = 2.0
IDLE = 10.0


def pool(
    name: str = "gpu", *, max_nodes: int = 4, devices: int = 8, scaling: str = "autoscaled", **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": v.API_VERSION,
        "kind": "AcceleratorPool",
        "metadata": {"name": name},
        "spec": {
            "provider": "aws",
            "accelerator": "h100-80gb",
            "devicesPerNode": devices,
            "maxNodes": max_nodes,
            "scaling": scaling,
            **spec,
        },
    }


def pod(
    name: str,
    gpus: int = 8,
    *,
    selector: dict[str, str] | None = None,
    node: str | None = None,
    phase: str = "Pending",
    tolerations: list[dict[str, str]] | None = None,
    resource: str = v.RESOURCE_NVIDIA_GPU,
) -> dict[str, Any]:
    asked = {resource: str(gpus)}
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"limits": asked, "requests": asked}}],
        "nodeSelector": {v.LABEL_POOL: "gpu"} if selector is None else selector,
        "tolerations": [GPU_TOLERATION] if tolerations is None else tolerations,
    }
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": spec, "status": {"phase": phase}}


def made_nodes(pool_obj: dict[str, Any], count: int, *, start: int = 0, ours: bool = False) -> list[dict[str, Any]]:
    spec = AcceleratorPoolSpec.model_validate(pool_obj["spec"])
    out = nodes.node_manifests(pool_obj["metadata"]["name"], spec, count, start=start)
    if ours:
        for n in out:
            n["metadata"]["annotations"][v.ANNOTATION_AUTOSCALED] = "true"
    return out


def scaler(cluster: autoscaler.FakeCluster) -> autoscaler.SimulatedAutoscaler:
    return autoscaler.SimulatedAutoscaler(cluster, scale_up_delay=DELAY, idle_seconds=IDLE, clock=lambda: 0.0)


def added_after_delay(cluster: autoscaler.FakeCluster) -> autoscaler.Actions:
    """A step when the pods are first seen, and one once they have waited the delay."""
    s = scaler(cluster)
    first = s.step(100.0)
    assert first.add == (), "nothing may be added before the scale-up delay"
    return s.step(100.0 + DELAY)


@pytest.mark.parametrize(
    ("pods", "pool_obj", "existing", "expect_nodes", "expect_unfit", "expect_capped"),
    [
        pytest.param([pod("a")], pool(), [], 1, 0, 0, id="one 8-GPU pod: one node"),
        pytest.param([pod("a"), pod("b")], pool(), [], 2, 0, 0, id="a gang of two 8-GPU pods: two nodes"),
        pytest.param([pod(n, 2) for n in "abcd"], pool(), [], 1, 0, 0, id="four 2-GPU pods share one node"),
        pytest.param([pod(n, 4) for n in "abc"], pool(), [], 2, 0, 0, id="three 4-GPU pods: two nodes"),
        pytest.param([pod(n) for n in "abcde"], pool(max_nodes=4), [], 4, 0, 1, id="maxNodes caps the pool"),
        pytest.param(
            [pod("x", node="gpu-0", phase="Running"), pod("y", node="gpu-1", phase="Running"), pod("a"), pod("b")],
            pool(max_nodes=3),
            made_nodes(pool(), 2),
            1,
            0,
            1,
            id="existing nodes count toward maxNodes",
        ),
        pytest.param([pod("a")], pool(), made_nodes(pool(), 1), 0, 0, 0, id="a free node of the pool takes it"),
        pytest.param([pod("a", 0)], pool(), [], 1, 0, 0, id="a pod without devices still needs a node"),
        pytest.param([pod("a", 16)], pool(), [], 0, 1, 0, id="more devices than a node has: unfit"),
        pytest.param([pod("a", tolerations=[])], pool(), [], 0, 1, 0, id="no toleration of the GPU taint: unfit"),
        pytest.param(
            [pod("a", resource=v.RESOURCE_GOOGLE_TPU)], pool(), [], 0, 1, 0, id="TPU request on a GPU pool: unfit"
        ),
        pytest.param(
            [pod("a", selector={v.LABEL_POOL: "gpu", v.LABEL_ZONE: "eu-west-1a"})],
            pool(),
            [],
            0,
            1,
            0,
            id="a selector label the new node would lack: unfit",
        ),
        pytest.param([pod("a", selector={})], pool(), [], 0, 0, 0, id="no pool selector: not the pool's pod"),
        pytest.param([pod("a", selector={v.LABEL_POOL: "other"})], pool(), [], 0, 0, 0, id="another pool's pod"),
        pytest.param([pod("a")], pool(scaling="fixed"), [], 0, 0, 0, id="a fixed pool never grows"),
        pytest.param([pod("a", phase="Running", node="x")], pool(), [], 0, 0, 0, id="a bound pod waits for nothing"),
        pytest.param(
            [pod("a", selector={"team": "ml", v.LABEL_GPU_PRODUCT: "NVIDIA-H100-80GB-HBM3"})],
            pool(nodeSelector={"team": "ml"}),
            [],
            1,
            0,
            0,
            id="pool nodeSelector: a pod with a superset of it",
        ),
        pytest.param(
            [pod("a", selector={v.LABEL_POOL: "gpu"})],
            pool(nodeSelector={"team": "ml"}),
            [],
            0,
            0,
            0,
            id="pool nodeSelector: the pool label alone is not enough",
        ),
    ],
)
def test_pending_pods_get_nodes(
    pods: list[dict[str, Any]],
    pool_obj: dict[str, Any],
    existing: list[dict[str, Any]],
    expect_nodes: int,
    expect_unfit: int,
    expect_capped: int,
) -> None:
    cluster = autoscaler.FakeCluster([pool_obj], existing, pods)
    actions = added_after_delay(cluster)
    assert len(actions.add) == expect_nodes, actions
    assert len(actions.unfit) == expect_unfit, actions.unfit
    assert len(actions.capped) == expect_capped, actions.capped
    created = [n for n in cluster.node_objs if n not in existing]
    assert len(created) == expect_nodes
    for n in created:
        assert n["metadata"]["annotations"][v.ANNOTATION_AUTOSCALED] == "true"
        assert n["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
        for key, val in (pool_obj["spec"].get("nodeSelector") or {v.LABEL_POOL: "gpu"}).items():
            assert n["metadata"]["labels"][key] == val


def test_a_new_node_counts_as_room_while_the_scheduler_binds() -> None:
    cluster = autoscaler.FakeCluster([pool()], [], [pod("a"), pod("b")])
    s = scaler(cluster)
    s.step(0.0)
    assert len(s.step(DELAY).add) == 2
    # The pods are still unbound and the new nodes carry the not-ready taint for a moment.
    for n in cluster.node_objs:
        n["spec"]["taints"].append({"key": v.TAINT_NOT_READY, "effect": "NoSchedule"})
    for t in (DELAY + 0.5, DELAY + 5, DELAY + 60):
        assert s.step(t).add == ()
    assert s.nodes_added == 2


def test_new_names_never_collide_nor_repeat() -> None:
    p = pool(max_nodes=8)
    foreign = [*made_nodes(p, 1, start=0), *made_nodes(p, 1, start=3)]
    busy = [pod("x", node="gpu-0", phase="Running"), pod("y", node="gpu-3", phase="Running")]
    cluster = autoscaler.FakeCluster([p], foreign, [*busy, pod("a")])
    s = scaler(cluster)
    s.step(0.0)
    assert [a.name for a in s.step(DELAY).add] == ["gpu-4"]
    # The new node goes idle and is removed; the next one does not take its name again.
    cluster.pod_objs = busy
    s.step(10.0)
    assert [r.name for r in s.step(10.0 + IDLE).remove] == ["gpu-4"]
    cluster.pod_objs = [*busy, pod("b")]
    s.step(30.0)
    assert [a.name for a in s.step(30.0 + DELAY).add] == ["gpu-5"]


def test_an_idle_node_it_made_is_removed_after_idle_seconds() -> None:
    cluster = autoscaler.FakeCluster([pool()], [], [pod("a")])
    s = scaler(cluster)
    s.step(0.0)
    (add,) = s.step(DELAY).add
    cluster.pod_objs = [pod("a", node=add.name, phase="Running")]
    assert s.step(5.0).remove == ()
    cluster.pod_objs = [pod("a", node=add.name, phase="Succeeded")]
    assert s.step(20.0).remove == (), "idle time starts when the pod ends"
    assert s.step(20.0 + IDLE - 0.1).remove == ()
    (rm,) = s.step(20.0 + IDLE).remove
    assert rm.name == add.name
    assert cluster.node_objs == []
    assert (s.nodes_added, s.nodes_removed) == (1, 1)


def test_never_removes_a_node_with_a_pod_or_a_node_it_did_not_make() -> None:
    p = pool()
    ours_busy, ours_nominated = made_nodes(p, 2, ours=True)
    foreign = made_nodes(p, 1, start=5)
    pods = [pod("run", node=ours_busy["metadata"]["name"], phase="Running"), pod("wait")]
    cluster = autoscaler.FakeCluster([p], [ours_busy, ours_nominated, *foreign], pods)
    s = scaler(cluster)
    for t in (0.0, 100.0, 1000.0):
        actions = s.step(t)
        assert actions.remove == ()
        assert actions.add == (), "the waiting pod has room on a node that exists"
    # Once the waiting pod is gone, the node it had been placed on is idle, the foreign one untouched.
    cluster.pod_objs = pods[:1]
    s.step(2000.0)
    assert [r.name for r in s.step(2000.0 + IDLE).remove] == [ours_nominated["metadata"]["name"]]
    assert {n["metadata"]["name"] for n in cluster.node_objs} == {"gpu-0", "gpu-5"}


def test_the_port_refuses_to_delete_a_node_a_pod_was_bound_to_meanwhile() -> None:
    (node,) = made_nodes(pool(), 1, ours=True)
    cluster = autoscaler.FakeCluster([pool()], [node], [])
    s = scaler(cluster)
    s.step(0.0)
    cluster.pod_objs = [pod("late", node="gpu-0", phase="Running")]
    memory_before = s.memory
    # Decide on a snapshot without the pod (as if it was bound between LIST and DELETE).
    snap = autoscaler.Snapshot.from_objects([pool()], [node], [])
    actions = autoscaler.decide(snap, memory_before, now=IDLE, scale_up_delay=DELAY, idle_seconds=IDLE)
    assert [r.name for r in actions.remove] == ["gpu-0"]
    assert cluster.delete_node("gpu-0") is False
    assert len(cluster.node_objs) == 1


def test_an_unreadable_pool_is_reported_and_the_others_still_scale() -> None:
    bad = pool("bad", accelerator="no-such-gpu")
    cluster = autoscaler.FakeCluster([bad, pool()], [], [pod("a")])
    actions = added_after_delay(cluster)
    assert len(actions.add) == 1


def test_running_steps_in_a_thread_survives_api_errors_and_stops() -> None:
    cluster = autoscaler.FakeCluster([pool()], [], [pod("a")])
    cluster.fail_next = autoscaler.ClusterUnavailable("list pools: HTTP 503")
    with autoscaler.running(cluster, scale_up_delay=0.0, idle_seconds=60.0, interval=0.01) as s:
        end = time.monotonic() + 5
        while s.nodes_added < 1 and time.monotonic() < end:
            time.sleep(0.01)
        assert s.nodes_added == 1
    assert s.error is None
    assert not any(t.name == "simulated-autoscaler" for t in threading.enumerate())


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the thread's own traceback
def test_running_raises_when_the_loop_broke() -> None:
    class Broken(autoscaler.FakeCluster):
        def nodes(self) -> list[dict[str, Any]]:
            raise KeyError("bug")

    with pytest.raises(RuntimeError, match="failed") as info, autoscaler.running(Broken([pool()]), interval=0.01):
        time.sleep(0.2)
    assert isinstance(info.value.__cause__, KeyError)


GPU_TAINT = {"key": v.TAINT_GPU, "value": "present", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        ({"key": v.TAINT_GPU, "operator": "Exists", "effect": "NoSchedule"}, True),
        ({"key": v.TAINT_GPU, "operator": "Exists"}, True),
        ({"operator": "Exists"}, True),
        ({"key": v.TAINT_GPU, "value": "present"}, True),
        ({"key": v.TAINT_GPU, "value": "absent"}, False),
        ({"key": v.TAINT_GPU, "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": v.TAINT_TPU, "operator": "Exists"}, False),
        ({"value": "present"}, False),
    ],
)
def test_tolerations_match_as_kubernetes_does(toleration: dict[str, str], expected: bool) -> None:
    assert autoscaler.tolerates([toleration], GPU_TAINT) is expected
