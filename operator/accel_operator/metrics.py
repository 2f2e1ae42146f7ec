"""Every Prometheus metric of the operator, on one injected registry.

Names follow ``accel_<subsystem>_<name>_<unit>``; label values come from enums or pool names
(bounded by the number of pools), never from tenant text.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from accel_api.enums import JobPhase


class OperatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.jobs = Gauge("accel_operator_jobs", "AcceleratorJobs by phase.", ["phase"], registry=r)
        self.admission_latency = Histogram(
            "accel_operator_admission_latency_seconds",
            "From an AcceleratorJob's creation (or its attempt's release) to its workload created.",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800),
            registry=r,
        )
        self.queue_depth = Gauge(
            "accel_operator_queue_depth", "Jobs waiting for capacity, by first-choice pool.", ["pool"], registry=r
        )
        self.reconcile_errors = Counter(
            "accel_operator_reconcile_errors_total",
            "Decisions that could not be applied, by kind.",
            ["kind"],
            registry=r,
        )
        self.api_retries = Counter(
            "accel_operator_api_retries_total", "API calls retried after a retryable error.", ["call"], registry=r
        )
        self.decisions = Counter(
            "accel_operator_decisions_total", "Decisions taken, by resulting phase.", ["phase"], registry=r
        )
        self.pass_seconds = Histogram(
            "accel_operator_pass_seconds",
            "One scheduling pass: observe, decide for every dirty job, apply.",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=r,
        )
        self.workloads_created = Counter(
            "accel_operator_workloads_created_total", "batch Jobs created (one per attempt).", registry=r
        )
        self.moves = Counter(
            "accel_operator_moves_total",
            "Running attempts ended to start the job again elsewhere, by reason (device-unhealthy, hung).",
            ["reason"],
            registry=r,
        )
        self.node_taints = Counter(
            "accel_operator_node_taints_total",
            "Device-unhealthy taints put on (taint) or taken off (untaint) nodes.",
            ["action"],
            registry=r,
        )
        self.early_warnings = Counter(
            "accel_operator_early_warnings_total",
            "Early warnings of a node's end acted on, by source (reconcile.early_warning.WarningSource values).",
            ["source"],
            registry=r,
        )
        self.checkpoint_requests = Counter(
            "accel_operator_checkpoint_requests_total",
            "Checkpoint-now requests sent to running jobs' pods (the annotation set to a new token), by reason: "
            "device-unhealthy (node reports), early-warning (a cloud's notice).",
            ["reason"],
            registry=r,
        )
        for phase in JobPhase:
            self.jobs.labels(phase.value)
