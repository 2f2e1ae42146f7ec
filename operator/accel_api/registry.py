"""The four kinds as Kubernetes knows them: plural, scope, short names and printer columns.

CRD generation, the loader and the operator's clients read the names from here.
"""

from dataclasses import dataclass, field

from accel_api.base import ApiModel
from accel_api.job import AcceleratorJob
from accel_api.nodereport import AcceleratorNodeReport
from accel_api.policy import AcceleratorPolicy
from accel_api.pool import AcceleratorPool


@dataclass(frozen=True)
class PrinterColumn:
    name: str
    type: str
    json_path: str
    priority: int = 0
    description: str = ""


@dataclass(frozen=True)
class Kind:
    kind: str
    plural: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...]
    model: type[ApiModel]
    columns: tuple[PrinterColumn, ...] = field(default=())

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.accel.dev"


_AGE = PrinterColumn("Age", "date", ".metadata.creationTimestamp")

JOB = Kind(
    kind="AcceleratorJob",
    plural="acceleratorjobs",
    singular="acceleratorjob",
    namespaced=True,
    short_names=("aj", "ajob"),
    model=AcceleratorJob,
    columns=(
        PrinterColumn("Team", "string", ".spec.team"),
        PrinterColumn("Phase", "string", ".status.phase"),
        PrinterColumn("Accelerator", "string", ".status.plan.accelerator"),
        PrinterColumn("Devices", "integer", ".status.plan.devices"),
        PrinterColumn("Spot", "boolean", ".status.plan.spot"),
        PrinterColumn("Cost", "number", ".status.cost.spentUsd", description="USD spent so far"),
        PrinterColumn("Pool", "string", ".status.plan.pool", priority=1),
        PrinterColumn("Preemptions", "integer", ".status.preemptions", priority=1),
        PrinterColumn("Attempt", "integer", ".status.attempt", priority=1),
        PrinterColumn("Workload", "string", ".status.workload", priority=1),
        _AGE,
    ),
)
POOL = Kind(
    kind="AcceleratorPool",
    plural="acceleratorpools",
    singular="acceleratorpool",
    namespaced=False,
    short_names=("ap", "apool"),
    model=AcceleratorPool,
    columns=(
        PrinterColumn("Accelerator", "string", ".spec.accelerator"),
        PrinterColumn("Capacity", "string", ".spec.capacityType"),
        PrinterColumn("Nodes", "integer", ".status.nodes"),
        PrinterColumn("Free", "integer", ".status.freeDevices"),
        PrinterColumn("Max-Nodes", "integer", ".spec.maxNodes"),
        _AGE,
    ),
)
POLICY = Kind(
    kind="AcceleratorPolicy",
    plural="acceleratorpolicies",
    singular="acceleratorpolicy",
    namespaced=False,
    short_names=("apol",),
    model=AcceleratorPolicy,
    columns=(_AGE,),
)
NODE_REPORT = Kind(
    kind="AcceleratorNodeReport",
    plural="acceleratornodereports",
    singular="acceleratornodereport",
    namespaced=False,
    short_names=("anr",),
    model=AcceleratorNodeReport,
    columns=(
        PrinterColumn("Node", "string", ".spec.nodeName"),
        PrinterColumn("Healthy", "boolean", ".status.healthy"),
        PrinterColumn("Devices", "integer", ".status.fragmentation.totalDevices"),
        PrinterColumn("Free", "integer", ".status.fragmentation.freeDevices"),
        PrinterColumn("Heartbeat", "date", ".status.heartbeatTime"),
    ),
)

KINDS: tuple[Kind, ...] = (JOB, POOL, POLICY, NODE_REPORT)
BY_KIND: dict[str, Kind] = {k.kind: k for k in KINDS}
