"""What every part of one operator process shares: its settings, catalog, metrics and adapters.

Built once at start (``app.build_context``, the real adapters) and handed to the handlers, so no
handler reads the environment or builds a client of its own. Every adapter is named when the
context is built: none defaults to a fake, so a wiring slip fails at start instead of silently
writing nothing (tests pass their fakes explicitly: ``tests.support.context.fake_context``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Final

from accel_api.catalog import Catalog
from accel_operator.adapters.aws.checkpoints import CheckpointStore
from accel_operator.adapters.aws.interruptions import InterruptionQueue
from accel_operator.adapters.gcp.tpu import TpuNodes
from accel_operator.adapters.kube.costs import CostWriter
from accel_operator.adapters.kube.jobs import JobWriter
from accel_operator.adapters.kube.lease import Elector
from accel_operator.adapters.kube.nodes import NodeWriter
from accel_operator.adapters.kube.workloads import WorkloadClient
from accel_operator.adapters.pricebook import PriceBook
from accel_operator.metrics import OperatorMetrics
from accel_operator.settings import OperatorSettings

# Where None means "not configured" (the feature is off), not "missing".
OPTIONAL: Final = frozenset({"interruptions", "tpu", "checkpoints", "watch_api"})


@dataclass(frozen=True, kw_only=True)
class OperatorContext:
    settings: OperatorSettings
    catalog: Catalog
    metrics: OperatorMetrics
    writer: JobWriter
    workloads: WorkloadClient
    elector: Elector
    # Node taints and checkpoint-now annotations: the scheduler's (reconcile/nodes/health.py,
    # consolidate.py, idle_stop.py) and the early warnings' (engine/signals.py).
    nodes: NodeWriter
    costs: CostWriter
    prices: PriceBook
    # The clouds' early-warning sources; None: not configured.
    interruptions: InterruptionQueue | None
    tpu: TpuNodes | None
    checkpoints: CheckpointStore | None  # S3 checkpoint lookups; None: S3 resumes wait with a reason
    # Makes the Kubernetes client the pod and workload informers watch with (handlers.pods);
    # typed loosely: this layer does not import the Kubernetes client.
    watch_api: Callable[[], Any] | None

    def __post_init__(self) -> None:
        missing = [f.name for f in fields(self) if f.name not in OPTIONAL and getattr(self, f.name) is None]
        if missing:
            raise TypeError(
                f"OperatorContext: no {', '.join(missing)}: every adapter is given when the context is built "
                "(app.build_context builds the real ones)"
            )
