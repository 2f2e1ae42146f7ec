"""The cluster entry point through the official client against a small local HTTP stand-in.

Not a control plane (the cluster tests have one): this checks the requests the agent sends —
paths, field selector, content type, the JSON patch — with the real ``kubernetes`` client.
"""

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from kubernetes import client

from accel_agent import run_cluster_pass
from accel_agent.app import build_agent
from accel_agent.backends.fake import FakeNvml, FakeProcess
from accel_agent.backends.nvml import NvmlBackend
from accel_agent.backends.tpu import TpuBackend
from accel_agent.kube import KubeClusterView
from accel_agent.settings import AgentSettings
from accel_api.enums import AgentBackend
from accel_api.nodereport import AcceleratorNodeReport

NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "kwok-gpu-0",
        "uid": "node-uid-7",
        "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    },
    "status": {"allocatable": {"nvidia.com/gpu": "4"}},
}
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "train-0", "namespace": "ml", "uid": "pod-uid-1", "creationTimestamp": "2026-11-13T10:00:00Z"},
    "spec": {
        "nodeName": "kwok-gpu-0",
        "containers": [{"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "3"}}}],
    },
    "status": {"phase": "Running"},
}
REPORTS = "/apis/accel.dev/v1alpha1/acceleratornodereports"
UNKNOWN_UID = "0b6f1c2e-9d3a-4c5b-8e7f-1a2b3c4d5e6f"


class StandIn:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str, Any]] = []
        self.queries: list[tuple[str, str, dict[str, list[str]]]] = []  # method, path, query
        self.objects: dict[str, dict[str, Any]] = {}


@pytest.fixture
def api() -> Iterator[tuple[StandIn, Any]]:
    state = StandIn()

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, code: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length)) if length else None

        def _record(self, body: Any = None) -> str:
            url = urlparse(self.path)
            state.requests.append((self.command, url.path, self.headers.get("Content-Type") or "", body))
            state.queries.append((self.command, url.path, parse_qs(url.query)))
            return url.path

        def do_GET(self) -> None:
            path = self._record()
            query = parse_qs(urlparse(self.path).query)
            if path == "/api/v1/nodes/kwok-gpu-0":
                self._reply(200, NODE)
            elif path == "/api/v1/pods" and query.get("fieldSelector") == ["spec.nodeName=kwok-gpu-0"]:
                self._reply(200, {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": [POD]})
            else:
                self._reply(404, {"kind": "Status", "code": 404, "message": "not found"})

        def do_POST(self) -> None:
            body = self._body()
            path = self._record(body)
            name = body["metadata"]["name"]
            if path != REPORTS:
                self._reply(404, {})
            elif name in state.objects:
                self._reply(409, {"kind": "Status", "code": 409, "reason": "AlreadyExists"})
            else:
                state.objects[name] = body
                self._reply(201, body)

        def do_PATCH(self) -> None:
            body = self._body()
            path = self._record(body)
            name = path.removeprefix(REPORTS + "/").removesuffix("/status")
            if name not in state.objects:
                self._reply(404, {"kind": "Status", "code": 404})
                return
            (op,) = body
            assert op["op"] == "add" and op["path"] == "/status"
            state.objects[name] = {**state.objects[name], "status": op["value"]}
            self._reply(200, state.objects[name])

        def log_message(self, format: str, *args: object) -> None:
            return None

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    config = client.Configuration(host=f"http://127.0.0.1:{httpd.server_address[1]}")
    api_client = client.ApiClient(config)
    try:
        yield state, api_client
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_run_cluster_pass_creates_and_patches_the_report(api: tuple[StandIn, Any]) -> None:
    state, api_client = api
    result = run_cluster_pass(api_client, node_name="kwok-gpu-0", pod_list=True)
    assert result.written, result.write_error
    stored = AcceleratorNodeReport.model_validate(state.objects["kwok-gpu-0"])
    assert stored.status is not None and stored.status.backend is AgentBackend.SIMULATED
    assert stored.status.fragmentation.total_devices == 4 and stored.status.fragmentation.free_devices == 1
    assert stored.model_dump(by_alias=True)["metadata"]["ownerReferences"][0]["uid"] == "node-uid-7"
    patch = next(r for r in state.requests if r[0] == "PATCH")
    assert patch[1] == f"{REPORTS}/kwok-gpu-0/status" and patch[2].startswith("application/json-patch+json")
    # a second agent start: the create meets a 409 and the patch still goes through
    again = run_cluster_pass(api_client, node_name="kwok-gpu-0", pod_list=True)
    assert again.written
    assert [r[0] for r in state.requests if r[1].startswith(REPORTS)] == ["POST", "PATCH", "POST", "PATCH"]


def test_cluster_view_reads(api: tuple[StandIn, Any]) -> None:
    _, api_client = api
    view = KubeClusterView(api_client)
    node = view.node("kwok-gpu-0")
    assert node is not None and node["metadata"]["uid"] == "node-uid-7"
    assert node["status"]["allocatable"] == {"nvidia.com/gpu": "4"}
    assert view.node("absent") is None
    pods = view.pods_on_node("kwok-gpu-0")
    assert [p["metadata"]["name"] for p in pods] == ["train-0"]
    assert pods[0]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "3"}


def pod_reads(state: StandIn) -> list[tuple[str, str, dict[str, list[str]]]]:
    return [q for q in state.queries if q[1].endswith("/pods") or "/pods/" in q[1]]


def assert_only_own_node_pods(state: StandIn, node: str) -> None:
    reads = pod_reads(state)
    assert reads, "the agent read no pods: the test proves nothing"
    for method, path, query in reads:
        assert (method, path) == ("GET", "/api/v1/pods"), (method, path)  # a list, never a single pod
        assert query.get("fieldSelector") == [f"spec.nodeName={node}"], query
        assert "watch" not in query, query


def test_the_simulated_backend_reads_only_its_own_nodes_pods(api: tuple[StandIn, Any]) -> None:
    state, api_client = api
    run_cluster_pass(api_client, node_name="kwok-gpu-0", pod_list=True)
    assert_only_own_node_pods(state, "kwok-gpu-0")


def test_the_pod_index_reads_only_its_own_nodes_pods(api: tuple[StandIn, Any], tmp_path: Path) -> None:
    # An NVML node: a GPU process whose cgroup names a pod the agent does not know yet.
    state, api_client = api
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "cgroup").write_text("0::/kubepods/besteffort/pod" + UNKNOWN_UID + "/" + "c" * 64 + "\n")
    nvml = FakeNvml.h100(1)
    nvml.devices[0].processes.append(FakeProcess(pid=4242))
    settings = AgentSettings(node_name="kwok-gpu-0", kubernetes=True, once=True, proc_root=tmp_path, pod_list=True)
    agent = build_agent(settings, api_client=api_client, backend=NvmlBackend(nvml, xid_events=False))
    try:
        agent.run_once()
    finally:
        agent.close()
    assert_only_own_node_pods(state, "kwok-gpu-0")


def test_by_default_the_agent_reads_no_pod_and_reports_the_pods_uid(api: tuple[StandIn, Any], tmp_path: Path) -> None:
    """Without the opt-in pod list, a GPU process's pod is reported by the UID its cgroup names,
    and the agent makes no pod request at all (its default role grants none)."""
    state, api_client = api
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "cgroup").write_text("0::/kubepods/besteffort/pod" + UNKNOWN_UID + "/" + "c" * 64 + "\n")
    nvml = FakeNvml.h100(1)
    nvml.devices[0].processes.append(FakeProcess(pid=4242))
    settings = AgentSettings(node_name="kwok-gpu-0", kubernetes=True, proc_root=tmp_path)
    agent = build_agent(settings, api_client=api_client, backend=NvmlBackend(nvml, xid_events=False))
    try:
        result = agent.run_once()
    finally:
        agent.close()
    assert result.written, result.write_error
    assert pod_reads(state) == []
    stored = AcceleratorNodeReport.model_validate(state.objects["kwok-gpu-0"])
    assert stored.status is not None
    (process,) = stored.status.devices[0].processes
    assert (process.pid, process.pod_uid, process.pod) == (4242, UNKNOWN_UID, None)


def test_the_tpu_backend_reads_only_its_own_nodes_pods(api: tuple[StandIn, Any], tmp_path: Path) -> None:
    state, api_client = api
    TpuBackend("kwok-gpu-0", view=KubeClusterView(api_client), dev_root=tmp_path).sample()
    assert_only_own_node_pods(state, "kwok-gpu-0")


def test_the_tpu_backend_without_the_pod_list_reads_no_pod(api: tuple[StandIn, Any], tmp_path: Path) -> None:
    state, api_client = api
    TpuBackend("kwok-gpu-0", view=KubeClusterView(api_client), dev_root=tmp_path, list_pods=False).sample()
    assert pod_reads(state) == []
