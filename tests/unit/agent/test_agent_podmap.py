"""Process → pod through /proc/<pid>/cgroup and the pod list; device → pod through pod-resources."""

from pathlib import Path
from typing import Any

import pytest

from accel_agent import kube, podmap
from accel_agent.backends import DeviceSample, MigSample, NodeSample, ProcessSample
from accel_api.enums import AcceleratorKind, AgentBackend
from accel_api.nodereport import PodRef

UID = "1f6c2a4e-93b5-4d7e-8c11-0a2b3c4d5e6f"
SYSTEMD_UID = UID.replace("-", "_")
CID = "a" * 64
CGROUPS = [
    # cgroup v2, systemd driver, containerd
    (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYSTEMD_UID}.slice/cri-containerd-{CID}.scope\n",
        UID,
        CID,
    ),
    # cgroup v2, cgroupfs driver
    (f"0::/kubepods/besteffort/pod{UID}/{CID}\n", UID, CID),
    # cgroup v1, cgroupfs, guaranteed QoS (no QoS folder), several controllers
    (f"12:memory:/kubepods/pod{UID}/{CID}\n11:cpu,cpuacct:/kubepods/pod{UID}/{CID}\n", UID, CID),
    # cgroup v1, systemd, docker
    (
        f"4:devices:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{SYSTEMD_UID}.slice/docker-{CID}.scope\n",
        UID,
        CID,
    ),
    # CRI-O
    (f"0::/kubepods.slice/kubepods-pod{SYSTEMD_UID}.slice/crio-{CID}.scope\n", UID, CID),
    # kubelet nested under its own slice (kind, some distributions)
    (
        f"0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{SYSTEMD_UID}.slice/cri-containerd-{CID}.scope\n",
        UID,
        CID,
    ),
    # the pod's own cgroup (a process in the pause container's parent): no container id
    (f"0::/kubepods/burstable/pod{UID}\n", UID, None),
    # a static pod: the UID is the config hash
    (f"0::/kubepods/burstable/pod{'b' * 32}/{CID}\n", "b" * 32, CID),
]
NOT_PODS = [
    "0::/system.slice/nvidia-persistenced.service\n",
    "0::/user.slice/user-1000.slice/session-3.scope\n",
    "0::/\n",
    "",
    "garbage without colons\n",
]


@pytest.mark.parametrize(("text", "uid", "cid"), CGROUPS)
def test_parse_cgroup(text: str, uid: str, cid: str | None) -> None:
    assert podmap.parse_cgroup(text) == podmap.CgroupRef(uid, cid)


@pytest.mark.parametrize("text", NOT_PODS)
def test_parse_cgroup_outside_pods(text: str) -> None:
    assert podmap.parse_cgroup(text) is None


def pod(uid: str, name: str, *, ns: str = "ml", containers: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns, "uid": uid},
        "spec": {"nodeName": "gpu-1"},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": cname, "containerID": f"containerd://{cid}"} for cid, cname in (containers or {}).items()
            ],
        },
    }


def proc_root(tmp_path: Path, pids: dict[int, str]) -> Path:
    for pid, text in pids.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(text)
    return tmp_path


def sample_with(*devices: DeviceSample) -> NodeSample:
    return NodeSample(AgentBackend.NVML, AcceleratorKind.GPU, devices=devices)


def test_processes_are_mapped_to_pods_and_containers(tmp_path: Path) -> None:
    root = proc_root(tmp_path, {10: f"0::/kubepods/burstable/pod{UID}/{CID}\n", 11: "0::/system.slice/x.service\n"})
    view = kube.StaticClusterView(pods=[pod(UID, "train-0", containers={CID: "trainer"})])
    mapper = podmap.PodMapper(proc_root=root, pods=podmap.PodIndex(view, "gpu-1"))
    procs = (ProcessSample(pid=10), ProcessSample(pid=11), ProcessSample(pid=12))  # 12 has ended
    got = mapper.apply(sample_with(DeviceSample(index=0, uuid="GPU-0", processes=procs))).devices[0].processes
    assert [p.pod for p in got] == [PodRef(namespace="ml", name="train-0", container="trainer"), None, None]
    assert [p.pid for p in got] == [10, 11, 12]  # an ended process stays, without a pod


def test_pod_list_is_refreshed_on_a_miss_but_not_more_often_than_allowed(tmp_path: Path) -> None:
    root = proc_root(tmp_path, {10: f"0::/kubepods/pod{UID}/{CID}\n"})
    view = kube.StaticClusterView(pods=[])
    now = [0.0]
    index = podmap.PodIndex(view, "gpu-1", min_refresh_seconds=30, monotonic=lambda: now[0])
    mapper = podmap.PodMapper(proc_root=root, pods=index)
    s = sample_with(DeviceSample(index=0, processes=(ProcessSample(pid=10),)))
    assert mapper.apply(s).devices[0].processes[0].pod is None
    view.pods.append(pod(UID, "late"))
    now[0] = 10.0
    assert mapper.apply(s).devices[0].processes[0].pod is None  # too soon to list again
    now[0] = 31.0
    assert mapper.apply(s).devices[0].processes[0].pod == PodRef(namespace="ml", name="late")
    now[0] = 100.0
    mapper.apply(s)
    assert view.calls == ["pods/gpu-1", "pods/gpu-1"]  # a hit does not list again


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, payload: bytes | str | int) -> bytes:
    if isinstance(payload, int):
        return encode_varint(number << 3) + encode_varint(payload)
    data = payload.encode() if isinstance(payload, str) else payload
    return encode_varint(number << 3 | 2) + encode_varint(len(data)) + data


def list_response(pods: list[tuple[str, str, list[tuple[str, list[tuple[str, list[str]]]]]]]) -> bytes:
    out = b""
    for ns, name, containers in pods:
        body = field(1, name) + field(2, ns)
        for cname, devices in containers:
            c = field(1, cname)
            for resource, ids in devices:
                d = field(1, resource) + b"".join(field(2, i) for i in ids) + field(3, field(1, field(1, 0)))
                c += field(2, d)
            c += field(3, 4) + field(3, 5)  # cpu_ids, ignored
            body += field(3, c)
        out += field(1, body)
    return out


def test_decode_pod_resources_list() -> None:
    raw = list_response(
        [
            ("ml", "train-0", [("trainer", [("nvidia.com/gpu", ["GPU-a", "GPU-b"])]), ("sidecar", [])]),
            ("ml", "infer-0", [("server", [("nvidia.com/mig-1g.10gb", ["MIG-x"]), ("example.com/nic", ["n0"])])]),
        ]
    )
    got = podmap.decode_list_response(raw)
    assert got == [
        podmap.Allocation("ml", "train-0", "trainer", "nvidia.com/gpu", ("GPU-a", "GPU-b")),
        podmap.Allocation("ml", "infer-0", "server", "nvidia.com/mig-1g.10gb", ("MIG-x",)),
        podmap.Allocation("ml", "infer-0", "server", "example.com/nic", ("n0",)),
    ]


@pytest.mark.parametrize("raw", [b"\x0a\x05abc", b"\x0a", b"\x0f\x00"])
def test_decode_rejects_broken_messages(raw: bytes) -> None:
    with pytest.raises(ValueError, match=r"truncated|unsupported"):
        podmap.decode_list_response(raw)


class Allocations:
    def __init__(self, items: list[podmap.Allocation]) -> None:
        self.items = items

    def allocations(self) -> list[podmap.Allocation]:
        return self.items


def test_devices_are_mapped_through_allocations(tmp_path: Path) -> None:
    alloc = Allocations(
        [
            podmap.Allocation("ml", "train-0", "trainer", "nvidia.com/gpu", ("GPU-0",)),
            # time-sliced replicas of one GPU held by two containers
            podmap.Allocation("ml", "a", "c", "nvidia.com/gpu", ("GPU-1::0",)),
            podmap.Allocation("ml", "b", "c", "nvidia.com/gpu", ("GPU-1::1",)),
            podmap.Allocation("ml", "infer", "srv", "nvidia.com/mig-1g.10gb", ("MIG-2-1",)),
            podmap.Allocation("ml", "nic", "c", "example.com/nic", ("GPU-3",)),  # not an accelerator
        ]
    )
    devices = (
        DeviceSample(index=0, uuid="GPU-0", processes=(ProcessSample(pid=99),)),  # no /proc entry
        DeviceSample(index=1, uuid="GPU-1", processes=(ProcessSample(pid=98),)),
        DeviceSample(
            index=2,
            uuid="GPU-2",
            mig_enabled=True,
            mig_instances=(MigSample(1, "1g.10gb", uuid="MIG-2-1"), MigSample(2, "1g.10gb", uuid="MIG-2-2")),
            processes=(ProcessSample(pid=97, gpu_instance_id=1),),
        ),
        DeviceSample(index=3, uuid="GPU-3"),
    )
    got = podmap.PodMapper(proc_root=tmp_path, allocations=alloc).apply(sample_with(*devices)).devices
    assert got[0].allocated_pods == (PodRef(namespace="ml", name="train-0", container="trainer"),)
    # one holder: the process without a cgroup answer is attributed to it
    assert got[0].processes[0].pod == PodRef(namespace="ml", name="train-0", container="trainer")
    assert [p.name for p in got[1].allocated_pods] == ["a", "b"]
    assert got[1].processes[0].pod is None  # two holders: no guess
    assert got[2].mig_instances[0].allocated_pods == (PodRef(namespace="ml", name="infer", container="srv"),)
    assert got[2].mig_instances[1].allocated_pods == ()
    assert got[2].processes[0].pod == PodRef(namespace="ml", name="infer", container="srv")
    assert got[3].allocated_pods == ()


def test_pod_resources_client_without_socket(tmp_path: Path) -> None:
    assert podmap.PodResourcesClient(tmp_path / "kubelet.sock").allocations() == []


def test_unavailable_samples_pass_through(tmp_path: Path) -> None:
    s = NodeSample(AgentBackend.NVML, AcceleratorKind.GPU, available=False, problems=("x",))
    assert podmap.PodMapper(proc_root=tmp_path).apply(s) is s


def test_pod_resources_client_over_a_real_grpc_socket(tmp_path: Path) -> None:
    grpc = pytest.importorskip("grpc")
    from concurrent import futures

    raw = list_response([("ml", "train-0", [("trainer", [("nvidia.com/gpu", ["GPU-a"])])])])
    seen: list[bytes] = []

    def list_handler(request: bytes, context: object) -> bytes:
        seen.append(request)
        return raw

    handler = grpc.method_handlers_generic_handler(
        "v1.PodResourcesLister",
        {
            "List": grpc.unary_unary_rpc_method_handler(
                list_handler, request_deserializer=lambda b: b, response_serializer=lambda b: b
            )
        },
    )
    sock = tmp_path / "kubelet.sock"
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix://{sock}")
    server.start()
    try:
        client = podmap.PodResourcesClient(sock, timeout_seconds=5)
        assert client.allocations() == [podmap.Allocation("ml", "train-0", "trainer", "nvidia.com/gpu", ("GPU-a",))]
        assert seen == [b""]  # an empty ListPodResourcesRequest
    finally:
        server.stop(grace=None)


def test_pod_resources_client_when_the_kubelet_does_not_answer(tmp_path: Path) -> None:
    pytest.importorskip("grpc")
    sock = tmp_path / "kubelet.sock"
    sock.write_text("")  # the path exists, nothing listens
    assert podmap.PodResourcesClient(sock, timeout_seconds=0.5).allocations() == []


# --- without the pod list (the default): the pod's UID ---------------------------------------------
def test_without_the_pod_list_a_process_carries_its_pods_uid(tmp_path: Path) -> None:
    root = proc_root(tmp_path, {10: f"0::/kubepods.slice/kubepods-pod{SYSTEMD_UID}.slice/cri-containerd-{CID}.scope\n"})
    alloc = Allocations([podmap.Allocation("ml", "train-0", "trainer", "nvidia.com/gpu", ("GPU-0",))])
    mapper = podmap.PodMapper(proc_root=root, allocations=alloc)
    procs = (ProcessSample(pid=10), ProcessSample(pid=12))  # 12 has no /proc entry
    (device,) = mapper.apply(sample_with(DeviceSample(index=0, uuid="GPU-0", processes=procs))).devices
    holder = PodRef(namespace="ml", name="train-0", container="trainer")
    assert device.allocated_pods == (holder,)
    # The UID the cgroup names is reported as read, never replaced by a guess from the holders
    # (a pod that sees every GPU may run it); a process without a cgroup answer gets the one holder.
    assert [(p.pid, p.pod_uid, p.pod) for p in device.processes] == [(10, UID, None), (12, None, holder)]


def test_with_the_pod_list_a_process_carries_both_its_pods_name_and_uid(tmp_path: Path) -> None:
    root = proc_root(tmp_path, {10: f"0::/kubepods/pod{UID}/{CID}\n"})
    view = kube.StaticClusterView(pods=[pod(UID, "train-0", containers={CID: "trainer"})])
    mapper = podmap.PodMapper(proc_root=root, pods=podmap.PodIndex(view, "gpu-1"))
    (device,) = mapper.apply(sample_with(DeviceSample(index=0, processes=(ProcessSample(pid=10),)))).devices
    assert device.processes[0].pod == PodRef(namespace="ml", name="train-0", container="trainer")
    assert device.processes[0].pod_uid == UID


def test_tpu_chips_take_the_kubelets_tpu_allocations_in_order(tmp_path: Path) -> None:
    alloc = Allocations(
        [
            podmap.Allocation("ml", "a", "c", "google.com/tpu", ("0", "1")),
            podmap.Allocation("ml", "b", "c", "google.com/tpu", ("2",)),
        ]
    )
    chips = tuple(DeviceSample(index=i) for i in range(4))
    got = podmap.PodMapper(proc_root=tmp_path, allocations=alloc).apply(sample_with(*chips)).devices
    assert [[p.name for p in d.allocated_pods] for d in got] == [["a"], ["a"], ["b"], []]
    # A backend that already knows the holders (the opt-in pod list) keeps them.
    held = tuple(DeviceSample(index=i, allocated_pods=(PodRef(namespace="x", name="y"),)) for i in range(2))
    kept = podmap.PodMapper(proc_root=tmp_path, allocations=alloc).apply(sample_with(*held)).devices
    assert [[p.name for p in d.allocated_pods] for d in kept] == [["y"], ["y"]]
