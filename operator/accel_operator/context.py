"""What every part of one operator process shares: its settings, catalog, metrics and adapters.

Built once at start (``app.build_context``) and handed to the handlers, so no handler reads the
environment or builds a client of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from accel_api.catalog import Catalog
from accel_operator.adapters.aws.checkpoints import CheckpointStore
from accel_operator.adapters.aws.interruptions import InterruptionQueue
from accel_operator.adapters.gcp.tpu import TpuNodes
from accel_operator.adapters.kube.costs import CostWriter, FakeCostWriter
from accel_operator.adapters.kube.jobs import JobWriter
from accel_operator.adapters.kube.lease import Elector
from accel_operator.adapters.kube.reschedule import RescheduleClient
from accel_operator.adapters.kube.signals import FakeSignalWriter, SignalWriter
from accel_operator.adapters.kube.workloads import WorkloadClient
from accel_operator.adapters.pricebook import PriceBook
from accel_operator.metrics import OperatorMetrics
from accel_operator.settings import OperatorSettings


@dataclass(frozen=True)
class OperatorContext:
    settings: OperatorSettings
    catalog: Catalog
    metrics: OperatorMetrics
    writer: JobWriter
    workloads: WorkloadClient
    elector: Elector
    reschedule: RescheduleClient  # node taints and checkpoint-now annotations (reconcile/nodes/health.py)
    # Early warnings (handlers.signals): the node/pod writer, and the clouds' sources when configured.
    signals: SignalWriter = field(default_factory=FakeSignalWriter)
    interruptions: InterruptionQueue | None = None
    tpu: TpuNodes | None = None
    costs: CostWriter = field(default_factory=FakeCostWriter)
    prices: PriceBook = field(default_factory=PriceBook)
    checkpoints: CheckpointStore | None = None  # S3 checkpoint lookups (built by app.build_context)
    # Makes the Kubernetes client the pod and workload informers watch with (handlers.pods); set
    # by app.build_context (typed loosely: this layer does not import the Kubernetes client).
    watch_api: Callable[[], Any] | None = None
