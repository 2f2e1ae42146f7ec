"""A simulated backend for KWOK nodes: devices whose load follows the pods bound to the node.

The local cluster's GPU and TPU nodes are Node objects with capacity (``nvidia.com/gpu: 8``) and
labels, and no hardware. This backend reads the node and its pods through a
:class:`~accel_agent.kube.ClusterView` and invents what NVML would say: one device per unit of
allocatable ``nvidia.com/gpu`` (or ``google.com/tpu``), handed to the pods' containers in order of
their requests; a held device is busy (90% utilization, 75% of its memory, one synthetic process
per container, pid derived from the pod UID), a device nobody holds is idle. Annotations steer it:

- ``accel.dev/simulated-utilization: "40"`` on a pod (its devices) or the node (all busy devices);
- ``accel.dev/simulated-memory-fraction: "0.5"`` likewise;
- ``accel.dev/simulated-faults: "1=ecc,3=lost"`` on the node — faults per device index, one of
  ``ecc``, ``lost``, ``thermal``, ``power-brake``, ``remap-pending``, ``remap-failed``, ``xid<N>``.

Everything it reports is labelled ``backend: simulated``. It is for the demo and the cluster tests.
"""

from __future__ import annotations

import uuid as uuidlib
import zlib
from typing import Any, Final

from accel_agent import kube
from accel_agent.backends import DeviceSample, NodeSample, ProcessSample, StatelessBackend
from accel_api import catalog, vocabulary
from accel_api.enums import AcceleratorKind, AgentBackend
from accel_api.nodereport import PodRef, RemappedRows

# Not yet in accel_api.vocabulary (the agent may not edit it); see agent/README.md.
ANNOTATION_SIM_UTILIZATION: Final = vocabulary.ANNOTATION_SIM_UTILIZATION
ANNOTATION_SIM_MEMORY_FRACTION: Final = vocabulary.ANNOTATION_SIM_MEMORY_FRACTION
ANNOTATION_SIM_FAULTS: Final = vocabulary.ANNOTATION_SIM_FAULTS

MIB: Final = 1024 * 1024
# A node without product labels is taken for the catalog's H100 (the local cluster's default).
DEFAULT_GPU: Final = "h100-80gb"
DEFAULT_UTILIZATION: Final = 90.0
DEFAULT_MEMORY_FRACTION: Final = 0.75


def tpu_memory_bytes(accelerator_label: str | None) -> int | None:
    """HBM per chip of the TPU type a GKE accelerator label names (the catalog's); None if unknown."""
    accel = catalog.default().by_product(accelerator_label)
    return accel.memory_bytes if accel is not None else None


_UUID_NAMESPACE: Final = uuidlib.UUID("5b1a4c1e-6d1b-4a43-9f0e-6f1c2d6e7a10")
_THROTTLE: Final = {"thermal": 0x40, "power-brake": 0x80}
_IDLE_MASK: Final = 0x1
_POWER_CAP_MASK: Final = 0x4


def _float(text: Any, default: float, low: float, high: float) -> float:
    try:
        value = float(str(text))
    except ValueError:
        return default
    return min(high, max(low, value))


def _annotations(obj: dict[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def parse_faults(text: str) -> dict[int, list[str]]:
    """``"1=ecc,3=lost"`` → ``{1: ["ecc"], 3: ["lost"]}``; malformed items are ignored."""
    faults: dict[int, list[str]] = {}
    for item in text.split(","):
        index, _, fault = item.strip().partition("=")
        if index.strip().isdigit() and fault.strip():
            faults.setdefault(int(index), []).append(fault.strip().lower())
    return faults


def synthetic_pid(pod_uid: str, container: str) -> int:
    return 1000 + zlib.crc32(f"{pod_uid}/{container}".encode()) % 4_000_000


class SimulatedBackend(StatelessBackend):
    KIND = AgentBackend.SIMULATED

    def __init__(self, view: kube.ClusterView, node_name: str) -> None:
        self._view = view
        self._node = node_name

    def sample(self) -> NodeSample:
        try:
            node = self._view.node(self._node)
            pods = self._view.pods_on_node(self._node) if node is not None else []
        except kube.KubeError as exc:
            return NodeSample(backend=self.KIND, accelerator_kind=None, available=False, problems=(str(exc),), calls=2)
        if node is None:
            return NodeSample(
                backend=self.KIND,
                accelerator_kind=None,
                available=False,
                problems=(f"node {self._node} not found",),
                calls=1,
            )
        gpus = kube.allocatable(node, vocabulary.RESOURCE_NVIDIA_GPU)
        tpus = kube.allocatable(node, vocabulary.RESOURCE_GOOGLE_TPU)
        labels = dict((node.get("metadata") or {}).get("labels") or {})
        if tpus and not gpus:
            kind, resource, count = AcceleratorKind.TPU, vocabulary.RESOURCE_GOOGLE_TPU, tpus
            accelerator = labels.get(vocabulary.LABEL_TPU_ACCELERATOR, "tpu")
            name = accelerator
            memory: int | None = tpu_memory_bytes(accelerator)
        else:
            kind, resource, count = AcceleratorKind.GPU, vocabulary.RESOURCE_NVIDIA_GPU, gpus
            hw = catalog.default().by_product(labels.get(vocabulary.LABEL_GPU_PRODUCT))
            hw = hw or catalog.default().accelerators[DEFAULT_GPU]
            name = labels.get(vocabulary.LABEL_GPU_PRODUCT, hw.product).replace("-", " ")
            default_mib = hw.memory_bytes // MIB
            memory = int(_float(labels.get(vocabulary.LABEL_GPU_MEMORY_MIB), default_mib, 1, 1 << 24)) * MIB
        node_notes = _annotations(node)
        faults = parse_faults(node_notes.get(ANNOTATION_SIM_FAULTS, ""))
        slots = kube.assign_devices(pods, resource, count)
        devices = tuple(
            self._device(
                i, kind=kind, name=name, memory=memory, holders=holders, node_notes=node_notes, faults=faults.get(i, [])
            )
            for i, holders in enumerate(slots)
        )
        return NodeSample(
            backend=self.KIND,
            accelerator_kind=kind,
            devices=devices,
            driver_version="simulated",
            calls=2,
        )

    def _device(
        self,
        index: int,
        *,
        kind: AcceleratorKind,
        name: str,
        memory: int | None,
        holders: list[kube.Holder],
        node_notes: dict[str, str],
        faults: list[str],
    ) -> DeviceSample:
        busy = bool(holders)
        pod_notes = _annotations(holders[0].pod_object) if holders else {}
        util = 0.0
        fraction = 0.0
        if busy:
            util = _float(
                pod_notes.get(ANNOTATION_SIM_UTILIZATION, node_notes.get(ANNOTATION_SIM_UTILIZATION)),
                DEFAULT_UTILIZATION,
                0.0,
                100.0,
            )
            fraction = _float(
                pod_notes.get(ANNOTATION_SIM_MEMORY_FRACTION, node_notes.get(ANNOTATION_SIM_MEMORY_FRACTION)),
                DEFAULT_MEMORY_FRACTION,
                0.0,
                1.0,
            )
        used = int(memory * fraction) if memory is not None else None
        refs = tuple(PodRef(namespace=h.namespace, name=h.pod, container=h.container or None) for h in holders)
        processes = tuple(
            ProcessSample(
                pid=synthetic_pid(h.uid, h.container),
                used_memory_bytes=(used // len(holders)) if used is not None else None,
                pod=ref,
            )
            for h, ref in zip(holders, refs, strict=True)
        )
        prefix = "TPU" if kind is AcceleratorKind.TPU else "GPU"
        mask = (_POWER_CAP_MASK if util >= 95 else 0) if busy else _IDLE_MASK
        for fault in faults:
            mask |= _THROTTLE.get(fault, 0)
        ecc = 1 if "ecc" in faults else 0
        remap = RemappedRows(pending="remap-pending" in faults, failed="remap-failed" in faults)
        xids = tuple(int(f[3:]) for f in faults if f.startswith("xid") and f[3:].isdigit())
        return DeviceSample(
            index=index,
            uuid=f"{prefix}-{uuidlib.uuid5(_UUID_NAMESPACE, f'{self._node}/{index}')}",
            name=name,
            pci_bus_id=f"00000000:{0x18 + index:02X}:00.0" if kind is AcceleratorKind.GPU else None,
            memory_total_bytes=memory,
            memory_used_bytes=used,
            utilization_gpu_percent=util,
            utilization_memory_percent=round(util * 0.6, 1),
            power_watts=round(70.0 + util / 100.0 * 630.0, 1),
            power_limit_watts=700.0,
            temperature_celsius=round(30.0 + util * 0.4, 1),
            sm_clock_mhz=1980 if busy else 345,
            throttle_mask=mask,
            ecc_uncorrected=ecc,
            remapped_rows=remap,
            mig_enabled=False,
            processes=processes,
            allocated_pods=refs,
            xid_errors=xids,
            lost="lost" in faults,
            errors=("simulated fault: device lost",) if "lost" in faults else (),
            not_supported=() if memory is not None else ("memoryTotalBytes", "memoryUsedBytes"),
        )
