"""A small world for table tests of ``decide`` and ``schedule_pass``: pools with nodes, jobs, pods
and workloads as the operator's views, folded into a Snapshot by the engine's own cache
(:class:`~accel_operator.engine.cache.Observed`) and planned by its plan cache, with no scheduler.
Tests of the scheduler itself (its writes, its loop) take ``world.scheduler``, built on first use
over the same indexes."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from accel_api import catalog
from accel_api.job import AcceleratorJobSpec, AcceleratorJobStatus
from accel_api.policy import AcceleratorPolicy
from accel_api.pool import AcceleratorPoolSpec
from accel_operator.adapters.kube.jobs import FakeJobWriter
from accel_operator.adapters.kube.workloads import FakeWorkloadClient
from accel_operator.engine import schedule
from accel_operator.engine.cache import Observed
from accel_operator.engine.clock import Clock, SystemClock
from accel_operator.engine.plans import Plans
from accel_operator.engine.scheduler import Indices, Scheduler
from accel_operator.metrics import OperatorMetrics
from accel_operator.planning import policy
from accel_operator.reconcile.common import policy_inputs
from accel_operator.reconcile.common.reports import DeviceReport, ReportView
from accel_operator.reconcile.common.snapshot import (
    JobKey,
    JobView,
    NodeView,
    PodView,
    PoolView,
    Snapshot,
    WorkloadView,
)
from accel_operator.settings import OperatorSettings
from tests.support.jobs import job_doc

T0 = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)


class World:
    def __init__(self) -> None:
        self.pools: dict[str, Any] = {}
        self.nodes: dict[str, Any] = {}
        self.pods: dict[Any, list[PodView]] = {}
        self.workloads: dict[Any, Any] = {}
        self.jobs: dict[Any, Any] = {}
        self.policies: dict[str, list[AcceleratorPolicy | policy.BrokenPolicy | None]] = {}
        self.teams: dict[str, list[str | None]] = {}
        self.created = T0
        # The status of an admission written at once, before its Job (the tests here show the
        # statuses the engine writes by hand); the held-back admission has its own tests
        # (tests/unit/operator/test_admission_record.py).
        self.settings = OperatorSettings(admitted_status_seconds=0, waiting_status_seconds=0)
        self.indices = Indices(self.pools, self.nodes, self.pods, self.workloads, self.jobs, self.policies, self.teams)
        self.observed = Observed()
        self.plans = Plans(catalog.default())
        self.preempted: set[str] = set()  # nodes a cloud API reports preempted
        self.clock: Clock = SystemClock()  # the scheduler's, when one is built
        self._scheduler: Scheduler | None = None

    @property
    def scheduler(self) -> Scheduler:
        """A scheduler over this world's indexes (and plan cache), built on first use with
        ``self.clock``: for tests of what the scheduler itself does."""
        if self._scheduler is None:
            self._scheduler = Scheduler(
                settings=self.settings,
                catalog=self.plans.catalog,
                writer=FakeJobWriter(),
                workloads=FakeWorkloadClient(),
                metrics=OperatorMetrics(),
                clock=self.clock,
            )
            self._scheduler.indices = self.indices
            self._scheduler.plans = self.plans
            self.plans.max_built = self.settings.plans_kept  # as the scheduler's own plans take it
        return self._scheduler

    def _policies_changed(self) -> None:
        if self._scheduler is not None:
            self._scheduler.policies_changed()  # what handlers.policies does on the event

    def policy(self, name: str, spend: list[dict[str, Any]] | None = None, **spec: Any) -> World:
        """An AcceleratorPolicy ``name`` (its spec in camelCase; ``spend``: its status.spend)."""
        doc: dict[str, Any] = {"metadata": {"name": name}, "spec": spec}
        if spend is not None:
            doc["status"] = {"spend": spend}
        self.policies[name] = [AcceleratorPolicy.model_validate(doc)]
        self._policies_changed()
        return self

    def broken_policy(self, name: str, **spec: Any) -> World:
        """A stored AcceleratorPolicy ``name`` the models refuse: indexed as handlers.policies does."""
        self.policies[name] = [policy.read(name, {"metadata": {"name": name}, "spec": spec})]
        self._policies_changed()
        return self

    def team(self, namespace: str, team: str | None) -> World:
        """The namespace's team label (None: unlabelled)."""
        self.teams[namespace] = [team]
        self._policies_changed()
        return self

    def pool(
        self, name: str, *, nodes: int = 1, per_node: int = 8, free: list[int] | None = None, **spec: Any
    ) -> World:
        doc = {
            "provider": "aws",
            "accelerator": "h100-80gb",
            "devicesPerNode": per_node,
            "maxNodes": max(nodes, 1),
            **spec,
        }
        view = PoolView(name, AcceleratorPoolSpec.model_validate(doc))
        self.pools[name] = [(view, ())]
        for i in range(nodes):
            node = f"{name}-{i}"
            self.nodes[node] = [NodeView(node, {"accel.dev/pool": name}, per_node)]
            used = per_node - (free[i] if free is not None else per_node)
            if used:
                self.pods.setdefault(node, []).append(PodView("other", f"user-{node}", node, "Running", used))
        return self

    def job(
        self,
        name: str,
        pool: str,
        *,
        devices: int = 1,
        status: dict[str, Any] | None = None,
        pinned: bool = True,
        **spec: Any,
    ) -> JobView:
        """A job of ``devices`` (examples/01), pinned to ``pool`` unless ``pinned`` is False."""
        doc = job_doc("ns", pool, devices=devices, name=name, **spec)
        if not pinned:
            doc["spec"]["placement"].pop("pools")
        self.created += dt.timedelta(seconds=1)
        view = JobView(
            namespace="ns",
            name=name,
            uid=f"uid-{name}",
            created=self.created,
            generation=1,
            spec=AcceleratorJobSpec.model_validate(doc["spec"]),
            spec_problems=(),
            status=AcceleratorJobStatus.model_validate(status or {}),
        )
        self.jobs[("ns", name)] = [view]
        return view

    def pod(self, job: str, attempt: int, index: int, *, node: str | None, phase: str = "Running", **kw: Any) -> None:
        """A pod of ``job``'s ``attempt``; one on a node that is not Pending started at ``T0`` unless
        ``started`` says otherwise (the cost ledger charges from its pods' start)."""
        if node and phase != "Pending":
            kw.setdefault("started", T0)
        pod = PodView("ns", f"{job}-a{attempt}-{index}", node, phase, kw.pop("devices", 8), ("ns", job), attempt, **kw)
        self.pods.setdefault(("ns", job), []).append(pod)
        if node:
            self.pods.setdefault(node, []).append(pod)

    def report(
        self,
        node: str,
        *,
        age: float = 10.0,
        util: float = 90.0,
        memory: float = 0.75,
        sick: dict[int, str] | None = None,
        pods: dict[int, tuple[str, ...]] | None = None,
        pod_uids: dict[int, tuple[str, ...]] | None = None,
        devices: int = 8,
        now: dt.datetime = T0,
    ) -> None:
        """``node``'s report, written ``age`` seconds before ``now``: every device at ``util``%,
        ``memory`` of 80 GiB used, ``sick`` devices unhealthy with that problem, ``pods`` by device
        (pod names in "ns"), ``pod_uids`` by device (what an agent without the pod list reports)."""
        sick, pods, uids = sick or {}, pods or {}, pod_uids or {}
        devs = tuple(
            DeviceReport(
                index=i,
                healthy=i not in sick,
                problems=(sick[i],) if i in sick else (),
                utilization=util,
                memory_used=int(memory * 80 * 2**30),
                memory_total=80 * 2**30,
                pods=frozenset(("ns", p) for p in pods.get(i, ())),
                pod_uids=frozenset(uids.get(i, ())),
            )
            for i in range(devices)
        )
        reports: Any = self.indices.reports
        reports[node] = [ReportView(node, now - dt.timedelta(seconds=age), devs)]

    def workload(self, job: str, attempt: int, **kw: Any) -> None:
        name = f"{job}-a{attempt}"
        self.workloads[("ns", name)] = [WorkloadView("ns", name, ("ns", job), attempt, **kw)]

    def observe(self, now: dt.datetime = T0) -> Snapshot:
        """Every index entry folded into one snapshot, as a full pass of the scheduler sees it
        (nothing written by this process yet: no overlay)."""
        self.observed.invalidate()
        self.observed.refresh(self.indices, _as_is, now, stale_after=self.settings.report_stale_seconds)
        return self.observed.snapshot(
            now,
            policy=policy_inputs.fold(self.policies, self.teams),
            preempted_nodes=frozenset(self.preempted),
        )

    def snapshot(self, now: dt.datetime = T0) -> Snapshot:
        """:meth:`observe` with every job that has a spec planned."""
        snap = self.observe(now)
        plans = {}
        for key, job in snap.jobs.items():
            plan = self.plans.plan(job, snap)
            if plan is not None:
                plans[key] = plan
        return replace(snap, plans=plans)

    def schedule_pass(
        self,
        now: dt.datetime = T0,
        keys: Iterable[JobKey] | None = None,
        *,
        marked: Iterable[JobKey] | None = None,
        busy: Iterable[JobKey] = (),
        full: bool = True,
    ) -> schedule.Pass:
        """One pure pass over :meth:`observe` at ``now``: ``keys`` (default every job) decided,
        ``marked`` ones as an event named them (default all of ``keys``), ``busy`` ones left to
        the next pass."""
        snap = self.observe(now)
        keys = list(snap.jobs) if keys is None else list(keys)
        marked = keys if marked is None else list(marked)
        rules = schedule.rules_from(self.settings, snap)
        return schedule.schedule_pass(snap, keys, now, rules, self.plans, marked=marked, busy=busy, full=full)


def _as_is(job: JobView) -> JobView:
    return job
