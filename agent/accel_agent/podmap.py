"""Which pod a GPU process or a device belongs to.

Two sources, both optional, joined on each sample:

1. **Per process** — NVML gives host pids. ``<proc_root>/<pid>/cgroup`` names the pod's UID and the
   container's id for cgroup v1 and v2, cgroupfs and systemd drivers
   (``/kubepods/besteffort/pod<uid>/<id>``,
   ``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>.slice/cri-containerd-<id>.scope``).
   The UID is reported as it is (``processes[].podUid``): the operator names the pod from its own
   pod cache, so the agent needs no pod permission. Only with the opt-in pod list
   (``ACCEL_AGENT_POD_LIST=true``) does the agent name it itself, through a list of the pods on this
   node (field selector ``spec.nodeName``), cached and refreshed only when an unknown UID shows up.
2. **Per device** — the kubelet's pod-resources API (gRPC ``v1.PodResourcesLister/List`` on
   ``/var/lib/kubelet/pod-resources/kubelet.sock``) says which container each device (GPU UUID or
   MIG UUID) was allocated to, even before the container starts using it. Its protobuf answer is
   decoded by hand (a dozen lines) so the agent needs no generated code; ``grpcio`` is imported only
   when the socket exists.

A process whose ``/proc`` entry is gone (it ended between NVML's answer and this lookup) stays
in the report without a pod; when the device was allocated to exactly one container, processes
without a cgroup answer are attributed to it. TPU chips have no UUID the kubelet names: the
``google.com/tpu`` allocations are handed to the chips in order (only how many are held is
known), unless the backend already said who holds them.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, Protocol

import grpc

from accel_agent import logtext
from accel_agent.backends import DeviceSample, MigSample, NodeSample, ProcessSample
from accel_api import vocabulary
from accel_api.nodereport import PodRef

log = logging.getLogger(__name__)

_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
# "pod" + UID; static (mirror) pods use the 32-hex config hash as their UID.
_POD_SEGMENT = re.compile(rf"pod({_UID}|[0-9a-f]{{32}})(?:\.slice)?$")
_CONTAINER_SEGMENT = re.compile(r"(?:^|[-:])([0-9a-f]{64})(?:\.scope)?$")
DEVICE_RESOURCES: Final = (vocabulary.RESOURCE_NVIDIA_GPU, vocabulary.RESOURCE_GOOGLE_TPU)
MIG_RESOURCE_PREFIX: Final = "nvidia.com/mig-"


@dataclass(frozen=True)
class CgroupRef:
    pod_uid: str
    container_id: str | None = None


def parse_cgroup(text: str) -> CgroupRef | None:
    """The pod UID (and container id) in a ``/proc/<pid>/cgroup`` file, or None outside a pod."""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        segments = [s for s in parts[2].split("/") if s]
        for i, segment in enumerate(segments):
            found = _POD_SEGMENT.search(segment)
            if not found:
                continue
            uid = found.group(1).replace("_", "-")
            container = None
            if i + 1 < len(segments):
                cid = _CONTAINER_SEGMENT.search(segments[i + 1])
                container = cid.group(1) if cid else None
            return CgroupRef(uid, container)
    return None


def read_cgroup(proc_root: Path, pid: int) -> CgroupRef | None:
    try:
        text = (proc_root / str(pid) / "cgroup").read_text()
    except OSError:  # the process ended, or /proc of the host is not mounted
        return None
    return parse_cgroup(text)


# --- pods on this node --------------------------------------------------------------------------
@dataclass(frozen=True)
class PodInfo:
    namespace: str
    name: str
    uid: str
    containers: dict[str, str]  # container id (no runtime prefix) -> container name


def pod_info(pod: dict[str, Any]) -> PodInfo | None:
    meta = pod.get("metadata") or {}
    if not meta.get("uid") or not meta.get("name"):
        return None
    containers: dict[str, str] = {}
    status = pod.get("status") or {}
    for key in ("containerStatuses", "initContainerStatuses"):
        for cs in status.get(key) or []:
            cid = str(cs.get("containerID") or "")
            if cid and cs.get("name"):
                containers[cid.split("://", 1)[-1]] = str(cs["name"])
    return PodInfo(str(meta.get("namespace") or "default"), str(meta["name"]), str(meta["uid"]), containers)


class PodLister(Protocol):
    def pods_on_node(self, node_name: str) -> list[dict[str, Any]]: ...


class PodIndex:
    """Pods on this node by UID, refreshed on a miss at most every ``min_refresh_seconds``."""

    def __init__(
        self,
        lister: PodLister,
        node_name: str,
        *,
        min_refresh_seconds: float = 30.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lister = lister
        self._node = node_name
        self._min_refresh = min_refresh_seconds
        self._monotonic = monotonic
        self._by_uid: dict[str, PodInfo] = {}
        self._loaded_at: float | None = None

    def refresh(self) -> None:
        infos = (pod_info(p) for p in self._lister.pods_on_node(self._node))
        self._by_uid = {i.uid: i for i in infos if i is not None}
        self._loaded_at = self._monotonic()

    def get(self, uid: str) -> PodInfo | None:
        if uid not in self._by_uid:
            stale = self._loaded_at is None or self._monotonic() - self._loaded_at >= self._min_refresh
            if stale:
                self.refresh()
        return self._by_uid.get(uid)


# --- kubelet pod-resources API ------------------------------------------------------------------
@dataclass(frozen=True)
class Allocation:
    namespace: str
    pod: str
    container: str
    resource_name: str
    device_ids: tuple[str, ...]


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) pairs of one protobuf message; length-delimited values as bytes."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            yield number, value
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise ValueError("truncated field")
            yield number, data[pos : pos + length]
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")


def _str(value: int | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else ""


def _message(data: bytes, *, repeated: int) -> tuple[dict[int, str], list[int | bytes]]:
    """One message's string fields by number (the last of a number wins) and the values of its
    repeated field ``repeated``."""
    strings: dict[int, str] = {}
    items: list[int | bytes] = []
    for number, value in _fields(data):
        if number == repeated:
            items.append(value)
        else:
            strings[number] = _str(value)
    return strings, items


def _embedded(items: list[int | bytes]) -> list[bytes]:
    return [i for i in items if isinstance(i, bytes)]


def decode_list_response(data: bytes) -> list[Allocation]:
    """Decode ``v1.ListPodResourcesResponse`` (k8s.io/kubelet/pkg/apis/podresources/v1)."""
    out: list[Allocation] = []
    for number, pod_raw in _fields(data):
        if number != 1 or not isinstance(pod_raw, bytes):  # repeated PodResources pod_resources = 1
            continue
        pod, containers = _message(pod_raw, repeated=3)  # name = 1, namespace = 2, containers = 3
        for c_raw in _embedded(containers):
            container, devices = _message(c_raw, repeated=2)  # ContainerResources: name = 1, devices = 2
            for d_raw in _embedded(devices):
                # ContainerDevices: resource_name = 1, device_ids = 2
                device, ids = _message(d_raw, repeated=2)
                name, namespace, cname = pod.get(1, ""), pod.get(2, ""), container.get(1, "")
                out.append(Allocation(namespace, name, cname, device.get(1, ""), tuple(_str(i) for i in ids)))
    return out


class AllocationSource(Protocol):
    def allocations(self) -> list[Allocation]: ...


class PodResourcesClient:
    """Reads device allocations from the kubelet; an empty list when the socket is absent."""

    METHOD: Final = "/v1.PodResourcesLister/List"

    def __init__(self, socket_path: Path, *, timeout_seconds: float = 2.0) -> None:
        self._socket = socket_path
        self._timeout = timeout_seconds
        self._call: Any = None
        self._warned = False

    def allocations(self) -> list[Allocation]:
        if not self._socket.exists():
            return []
        try:
            if self._call is None:
                channel = grpc.insecure_channel(f"unix://{self._socket}")
                self._call = channel.unary_unary(
                    self.METHOD, request_serializer=lambda _request: b"", response_deserializer=lambda raw: raw
                )
            raw = self._call(None, timeout=self._timeout)
        except grpc.RpcError as exc:  # kubelet down or restarting: no allocations this pass
            log.warning("pod-resources List failed: %s", logtext.shorten(exc))
            self._call = None
            return []
        try:
            return decode_list_response(bytes(raw))
        except ValueError as exc:
            log.warning("pod-resources answer could not be decoded: %s", logtext.shorten(exc))
            return []


def _device_id(raw: str) -> str:
    # Time-sliced replicas of the NVIDIA device plugin are "<uuid>::<n>".
    return raw.split("::", 1)[0]


# --- joining ------------------------------------------------------------------------------------
class PodMapper:
    """Fills ``ProcessSample.pod`` and ``allocated_pods`` of a sample; leaves unknowns empty."""

    def __init__(
        self,
        *,
        proc_root: Path = Path("/proc"),
        pods: PodIndex | None = None,
        allocations: AllocationSource | None = None,
    ) -> None:
        self._proc_root = proc_root
        self._pods = pods
        self._allocations = allocations

    def _pod_of(self, pid: int) -> tuple[PodRef | None, str | None]:
        """The pod of ``pid`` where the pod list names it, and its UID from the cgroup path."""
        ref = read_cgroup(self._proc_root, pid)
        if ref is None:
            return None, None
        info = self._pods.get(ref.pod_uid) if self._pods is not None else None
        if info is None:
            return None, ref.pod_uid
        container = info.containers.get(ref.container_id) if ref.container_id else None
        return PodRef(namespace=info.namespace, name=info.name, container=container), ref.pod_uid

    def _by_device(self) -> tuple[dict[str, list[PodRef]], list[PodRef]]:
        """Holders by device id, and one holder per allocated TPU chip (in the kubelet's order)."""
        if self._allocations is None:
            return {}, []
        out: dict[str, list[PodRef]] = {}
        tpu: list[PodRef] = []
        for a in self._allocations.allocations():
            if a.resource_name not in DEVICE_RESOURCES and not a.resource_name.startswith(MIG_RESOURCE_PREFIX):
                continue
            ref = PodRef(namespace=a.namespace, name=a.pod, container=a.container or None)
            if a.resource_name == vocabulary.RESOURCE_GOOGLE_TPU:
                tpu += [ref] * len(a.device_ids)
            for raw in a.device_ids:
                refs = out.setdefault(_device_id(raw), [])
                if ref not in refs:
                    refs.append(ref)
        return out, tpu

    def apply(self, sample: NodeSample) -> NodeSample:
        if not sample.available or not sample.devices:
            return sample
        by_device, tpu = self._by_device()
        devices = tuple(self._device(d, by_device) for d in sample.devices)
        if tpu and not any(d.allocated_pods for d in devices):
            # Chips without a UUID (TPU): which chip a pod got is not visible, only how many.
            devices = tuple(
                replace(d, allocated_pods=(tpu[i],)) if d.uuid is None and i < len(tpu) else d
                for i, d in enumerate(devices)
            )
        return replace(sample, devices=devices)

    def _device(self, d: DeviceSample, by_device: dict[str, list[PodRef]]) -> DeviceSample:
        allocated = tuple(by_device.get(d.uuid or "", [])) if d.uuid else ()
        allocated = allocated or d.allocated_pods
        migs = tuple(
            replace(m, allocated_pods=tuple(by_device.get(m.uuid or "", [])) or m.allocated_pods)
            for m in d.mig_instances
        )
        processes = tuple(self._process(p, d, allocated, migs) for p in d.processes)
        return replace(d, processes=processes, allocated_pods=allocated, mig_instances=migs)

    def _process(
        self, p: ProcessSample, d: DeviceSample, allocated: Sequence[PodRef], migs: Sequence[MigSample]
    ) -> ProcessSample:
        if p.pod is not None:
            return p
        pod, uid = self._pod_of(p.pid)
        if pod is None and uid is None:
            # No cgroup answer: the device's one holder, if it has one. A known UID is not
            # overridden by a guess: a pod that sees every GPU (a monitoring agent) may run it.
            holders: Sequence[PodRef] = allocated
            if p.gpu_instance_id is not None:
                holders = next((m.allocated_pods for m in migs if m.gpu_instance_id == p.gpu_instance_id), ())
            if len(holders) == 1:
                pod = holders[0]
        return replace(p, pod=pod, pod_uid=uid or p.pod_uid)
