"""The TPU backend: what a TPU node can tell without the TPU runtime's metrics.

Utilization, HBM use, power, temperature and per-chip processes of a TPU come from libtpu's
metrics service (what ``tpu-info`` reads) inside the workload's own container; a separate agent
pod cannot reach them, so this backend does not pretend to. It reports:

- the chips: ``google.com/tpu`` allocatable of the Node (when the API is reachable), checked
  against the chips visible on the host (``/dev/accel*`` on v4/v5e, ``/dev/vfio/<n>`` on v5p/v6e);
  fewer visible than allocatable marks the missing ones lost;
- the accelerator type from ``cloud.google.com/gke-tpu-accelerator`` and its HBM size per chip;
- how many chips pods hold, handed out in order, since which chip a pod got is not visible: from
  the kubelet's pod-resources API (:mod:`accel_agent.podmap`), or, with the opt-in pod list, from
  the ``google.com/tpu`` requests of the pods on the node;
- every field it cannot measure in ``notSupported``.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Final

from accel_agent import kube, logtext
from accel_agent.backends import DeviceSample, NodeSample, StatelessBackend
from accel_agent.backends.simulated import tpu_memory_bytes
from accel_api import vocabulary
from accel_api.enums import AcceleratorKind, AgentBackend
from accel_api.nodereport import PodRef

NOT_MEASURED: Final = (
    "utilizationGpuPercent",
    "utilizationMemoryPercent",
    "memoryUsedBytes",
    "powerWatts",
    "powerLimitWatts",
    "temperatureCelsius",
    "smClockMhz",
    "throttleReasons",
    "eccUncorrected",
    "remappedRows",
    "migEnabled",
    "processes",
    "xidErrors",
)
_VFIO_GROUP = re.compile(r"^\d+$")
log = logging.getLogger(__name__)


def local_chips(dev_root: Path) -> int:
    """TPU chips the host exposes: ``/dev/accel<N>`` (v4, v5e) or ``/dev/vfio/<N>`` (v5p, v6e)."""
    accel = [p for p in dev_root.glob("accel*") if p.name[5:].isdigit()]
    if accel:
        return len(accel)
    vfio = dev_root / "vfio"
    if vfio.is_dir():
        return sum(1 for p in vfio.iterdir() if _VFIO_GROUP.match(p.name))
    return 0


class TpuBackend(StatelessBackend):
    KIND = AgentBackend.TPU

    def __init__(
        self,
        node_name: str,
        *,
        view: kube.ClusterView | None = None,
        dev_root: Path = Path("/dev"),
        list_pods: bool = True,
    ) -> None:
        self._node = node_name
        self._view = view
        self._dev = dev_root
        self._list_pods = list_pods

    def sample(self) -> NodeSample:
        problems: list[str] = []
        node = None
        pods: list[dict[str, object]] = []
        calls = 0
        if self._view is not None:
            try:
                calls += 1
                node = self._view.node(self._node)
                if node is not None and self._list_pods:
                    calls += 1
                    pods = list(self._view.pods_on_node(self._node))
            except kube.KubeError as exc:
                # Not a fault of the node: the chips on the host are still reported.
                log.warning("could not read node %s from the API: %s", self._node, logtext.shorten(exc))
                problems.append(f"could not read the node from the API: {exc}")
        visible = local_chips(self._dev)
        allocatable = kube.allocatable(node, vocabulary.RESOURCE_GOOGLE_TPU) if node else 0
        count = max(visible, allocatable)
        if count == 0:
            reason = "no TPU chips visible on the host and none allocatable on the node"
            return NodeSample(
                backend=self.KIND,
                accelerator_kind=AcceleratorKind.TPU,
                available=False,
                problems=(*problems, reason),
                not_supported=NOT_MEASURED,
                calls=calls,
            )
        labels = dict(((node or {}).get("metadata") or {}).get("labels") or {})
        accelerator = labels.get(vocabulary.LABEL_TPU_ACCELERATOR)
        memory = tpu_memory_bytes(accelerator)
        slots = kube.assign_devices(pods, vocabulary.RESOURCE_GOOGLE_TPU, count)
        # Only when the host can be looked at (chips visible) can it say that some are missing.
        missing_from = visible if 0 < visible < allocatable else count
        devices = tuple(
            DeviceSample(
                index=i,
                name=accelerator or "tpu",
                memory_total_bytes=memory,
                allocated_pods=tuple(
                    PodRef(namespace=h.namespace, name=h.pod, container=h.container or None) for h in holders
                ),
                lost=i >= missing_from,
                errors=(f"allocatable says {allocatable} chips, the host shows {visible}",)
                if i >= missing_from
                else (),
                not_supported=NOT_MEASURED,
            )
            for i, holders in enumerate(slots)
        )
        return NodeSample(
            backend=self.KIND,
            accelerator_kind=AcceleratorKind.TPU,
            devices=devices,
            not_supported=NOT_MEASURED,
            calls=calls,
        )
