"""Every Prometheus metric of the operator, on one injected registry.

Names follow ``accel_<subsystem>_<name>_<unit>``; label values come from enums or pool names
(bounded by the number of pools), never from tenant text.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterable, Iterator, Mapping
from importlib import metadata

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

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
        self.api_writes = Counter(
            "accel_operator_api_writes_total",
            "Writes the scheduler sent to the API server, by kind: status (a job's status patch), event (an "
            "Event created), event_series (an Event's series patched: engine/events.py), workload (a batch Job).",
            ["write"],
            registry=r,
        )
        self.events_coalesced = Counter(
            "accel_operator_events_coalesced_total",
            "Events not written: a repeat of the same (job, type, reason) within the series' refresh interval, "
            "counted into its series (engine/events.py).",
            registry=r,
        )
        self.waiting_held = Counter(
            "accel_operator_waiting_held_total",
            "New jobs whose first 'still waiting' status and Event were held back (waiting_status_seconds from "
            "the job's creation); those admitted meanwhile never write them (engine/apply.py).",
            registry=r,
        )
        for write in ("status", "event", "event_series", "workload"):
            self.api_writes.labels(write)
        self.workloads_created = Counter(
            "accel_operator_workloads_created_total", "batch Jobs created (one per attempt).", registry=r
        )
        self.swept = Counter(
            "accel_operator_swept_total",
            "batch Jobs and pods of ours deleted by the sweep (reconcile.job.sweep), by kind (workload, pod) and "
            "reason (job-gone, other-owner, old-attempt).",
            ["kind", "reason"],
            registry=r,
        )
        self.moves = Counter(
            "accel_operator_moves_total",
            "Running attempts ended to start the job again elsewhere, by reason "
            "(device-unhealthy, hung, consolidation).",
            ["reason"],
            registry=r,
        )
        self.consolidation_moves = Counter(
            "accel_operator_consolidation_moves_total",
            "Jobs moved to make room for a gang in a fragmented pool, by stage (reconcile.consolidate.Stage: "
            "requested, moved, abandoned).",
            ["stage"],
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
        self.fenced_writes = Counter(
            "accel_operator_fenced_writes_total",
            "Writes dropped because this replica no longer held the Lease when they were due.",
            registry=r,
        )
        self.rollup_write_failures = Counter(
            "accel_operator_cost_rollup_write_failures_total",
            "Writes of the durable cost rollup that failed, a conflict with another writer aside (until one "
            "succeeds, deleted jobs' money is held in this process's memory only).",
            registry=r,
        )
        for phase in JobPhase:
            self.jobs.labels(phase.value)
        # The lean informers (adapters/kube/informer.py), read at each scrape.
        self.watches = WatchStats()
        r.register(self.watches)
        # Cost: counters derived from the jobs' ledgers in status (see CostCounters), so a restart
        # or a change of leader neither loses nor doubles a dollar.
        self.cost = CostCounters()
        r.register(self.cost)
        self.leader = Gauge(
            "accel_operator_leader",
            "1 while this replica holds the Lease (it decides, writes and exports the cost counters), else 0.",
            registry=r,
        )
        self.build_info = Gauge(
            "accel_operator_build_info",
            "Always 1; the labels say which operator runs (its distribution's version) on which Python.",
            ["version", "python"],
            registry=r,
        )
        self.build_info.labels(_version(), platform.python_version()).set(1)
        self.budget_used = Gauge(
            "accel_cost_budget_used_ratio",
            "A team's spending in the current budget period over its limit, per policy and period.",
            ["policy", "team", "period"],
            registry=r,
        )
        self.price_fallbacks = Counter(
            "accel_cost_price_fallbacks_total",
            "Accrual ticks that priced a pool from its static price because its live source failed.",
            ["pool"],
            registry=r,
        )
        self.price_live = Gauge(
            "accel_cost_price_live",
            "1 when the pool's price comes from its live source now, 0 when it fell back to the static price.",
            ["pool"],
            registry=r,
        )
        self.accrual_seconds = Histogram(
            "accel_cost_accrual_seconds",
            "One accrual step: every job's ledger, every policy's team spending.",
            buckets=(0.001, 0.01, 0.05, 0.1, 0.5, 1, 5),
            registry=r,
        )


CostKey = tuple[str, str, str]  # (team, pool, capacity type)


def _version() -> str:
    try:
        return metadata.version("accel-operator")
    except metadata.PackageNotFoundError:  # run from a source tree without the distribution
        return "unknown"


class CostCounters(Collector):
    """``accel_cost_usd_total``, ``accel_cost_lost_to_preemption_usd_total`` and
    ``accel_cost_idle_usd_total`` by team, pool and capacity type: the sums of the jobs' ledgers,
    set by the accrual step. A counter's value is the ledger's, not increments this process
    added, so it never counts a dollar twice; deleting a job lowers it (a counter reset)."""

    def __init__(self) -> None:
        self.values: dict[str, dict[CostKey, float]] = {"spent": {}, "lost": {}, "idle": {}}
        # Only the leader's figures are current: a replica that lost the Lease keeps its last ones,
        # which a dashboard summing over replicas would count twice. None: always exported.
        self.leading: Callable[[], bool] | None = None

    def set(self, spent: Mapping[CostKey, float], lost: Mapping[CostKey, float], idle: Mapping[CostKey, float]) -> None:
        self.values = {"spent": dict(spent), "lost": dict(lost), "idle": dict(idle)}

    def collect(self) -> Iterator[CounterMetricFamily]:
        names = {
            "spent": ("accel_cost_usd", "USD spent on accelerators, from the jobs' ledgers."),
            "lost": ("accel_cost_lost_to_preemption_usd", "USD of work that preemption threw away (done again)."),
            "idle": ("accel_cost_idle_usd", "USD of allocated devices that node reports showed idle."),
        }
        current = self.leading is None or self.leading()
        for key, (name, doc) in names.items():
            family = CounterMetricFamily(name, doc, labels=["team", "pool", "capacity_type"])
            for labels, value in sorted(self.values[key].items()) if current else ():
                family.add_metric(list(labels), value)
            yield family


class WatchStats(Collector):
    """``accel_operator_watch_events_total``, ``accel_operator_watch_relists_total``,
    ``accel_operator_watch_unchanged_total`` and ``accel_operator_watch_listed`` by resource: what
    the informers counted, read from ``source`` (``(resource, events, relists, listed, unchanged)``
    rows; set when the informers start) at each scrape."""

    def __init__(self) -> None:
        self.source: Callable[[], Iterable[tuple[str, int, int, bool, int]]] = lambda: ()

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        rows = list(self.source())
        events = CounterMetricFamily(
            "accel_operator_watch_events", "Watch events the informers received, by resource.", labels=["resource"]
        )
        relists = CounterMetricFamily(
            "accel_operator_watch_relists",
            "Listings after the first, by resource: after 410 Gone or a failed watch (a steady rise: the API "
            "server or the network drops the watches).",
            labels=["resource"],
        )
        unchanged = CounterMetricFamily(
            "accel_operator_watch_unchanged",
            "Watch events dropped in the watch thread because the operator's view of the object did not change "
            "(a node's heartbeat), by resource.",
            labels=["resource"],
        )
        listed = GaugeMetricFamily(
            "accel_operator_watch_listed",
            "1 once every informer of the resource holds its first listing (no pass runs before).",
            labels=["resource"],
        )
        for resource, n_events, n_relists, is_listed, n_unchanged in rows:
            events.add_metric([resource], n_events)
            relists.add_metric([resource], n_relists)
            unchanged.add_metric([resource], n_unchanged)
            listed.add_metric([resource], 1.0 if is_listed else 0.0)
        yield events
        yield relists
        yield unchanged
        yield listed
