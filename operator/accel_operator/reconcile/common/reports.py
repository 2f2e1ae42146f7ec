"""What the node agents report, as the snapshot's frozen values (one :class:`ReportView` per node).

Only what the rescheduling decisions (:mod:`health`) read: when the report was last written, and
per device whether it is healthy (and why not), its utilization, memory and profiling counters, and the pods it
belongs to (by namespace/name, and by UID where the agent, listing no pods, knows only the UID its
process's cgroup names), and how many of its processes no pod owns (:mod:`node_capacity` takes a device that
only something Kubernetes does not know of uses out of the free ones). A report whose heartbeat
is older than the staleness timeout is *stale*: no decision is taken on it, so a node whose agent
stopped writing is never condemned on old news.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from accel_api.nodereport import DeviceProfile

PodKey = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True, slots=True)
class DeviceReport:
    index: int
    healthy: bool = True
    problems: tuple[str, ...] = ()
    utilization: float | None = None  # GPU utilization, percent; None when not measured (TPU)
    memory_used: int | None = None
    memory_total: int | None = None
    pods: frozenset[PodKey] = frozenset()  # allocated to, or running a process of, these pods
    pod_uids: frozenset[str] = frozenset()  # running a process of the pods of these UIDs
    stray_processes: int = 0  # processes no pod owns: Kubernetes does not know of them
    utilization_memory: float | None = None  # NVML memory utilization, percent (the basic counters)
    profile: DeviceProfile | None = None  # the profiling counters (``kubectl accel top`` diagnoses from them)

    def describe(self) -> str:
        """``device 3 (uncorrectable ECC errors: 2)``: the device and its first problem."""
        why = self.problems[0] if self.problems else "reported unhealthy"
        return f"device {self.index} ({why})"


@dataclass(frozen=True, slots=True)
class ReportView:
    node: str
    heartbeat: dt.datetime | None  # the agent's last write; None when it never said
    devices: tuple[DeviceReport, ...] = ()

    def fresh(self, now: dt.datetime, stale_after: float) -> bool:
        return self.heartbeat is not None and (now - self.heartbeat).total_seconds() <= stale_after

    @property
    def sick(self) -> tuple[DeviceReport, ...]:
        return tuple(d for d in self.devices if not d.healthy)

    def devices_of(self, pods: frozenset[PodKey], uids: frozenset[str] = frozenset()) -> tuple[DeviceReport, ...]:
        """The devices of these pods: named by the report, or running a process of one of ``uids``
        (the same pods' UIDs, from the operator's own pod cache)."""
        return tuple(d for d in self.devices if d.pods & pods or d.pod_uids & uids)

    def age(self, now: dt.datetime) -> str:
        if self.heartbeat is None:
            return "no heartbeat"
        return f"last heartbeat {int((now - self.heartbeat).total_seconds())}s ago"
