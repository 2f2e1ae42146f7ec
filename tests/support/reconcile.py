"""A small world for table tests of ``decide``: pools with nodes, jobs, pods and workloads as the
operator's views, folded into a Snapshot by the scheduler's own ``observe``."""

from __future__ import annotations

import datetime as dt
from typing import Any

from accel_api import catalog
from accel_api.job import AcceleratorJobSpec, AcceleratorJobStatus
from accel_api.policy import AcceleratorPolicy
from accel_api.pool import AcceleratorPoolSpec
from accel_operator.adapters.kube.jobs import FakeJobWriter
from accel_operator.adapters.kube.workloads import FakeWorkloadClient
from accel_operator.engine.scheduler import Indices, Scheduler
from accel_operator.metrics import OperatorMetrics
from accel_operator.reconcile.common.reports import DeviceReport, ReportView
from accel_operator.reconcile.common.snapshot import JobView, NodeView, PodView, PoolView, Snapshot, WorkloadView
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
        self.policies: dict[str, list[AcceleratorPolicy | None]] = {}
        self.teams: dict[str, list[str | None]] = {}
        self.created = T0
        self.scheduler = Scheduler(
            settings=OperatorSettings(),
            catalog=catalog.default(),
            writer=FakeJobWriter(),
            workloads=FakeWorkloadClient(),
            metrics=OperatorMetrics(),
        )
        self.scheduler.indices = Indices(
            self.pools, self.nodes, self.pods, self.workloads, self.jobs, self.policies, self.teams
        )

    def policy(self, name: str, spend: list[dict[str, Any]] | None = None, **spec: Any) -> World:
        """An AcceleratorPolicy ``name`` (its spec in camelCase; ``spend``: its status.spend)."""
        doc: dict[str, Any] = {"metadata": {"name": name}, "spec": spec}
        if spend is not None:
            doc["status"] = {"spend": spend}
        self.policies[name] = [AcceleratorPolicy.model_validate(doc)]
        self.scheduler.policies_changed()  # what handlers.policies does on the event
        return self

    def team(self, namespace: str, team: str | None) -> World:
        """The namespace's team label (None: unlabelled)."""
        self.teams[namespace] = [team]
        self.scheduler.policies_changed()
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
        devices: int = 8,
        now: dt.datetime = T0,
    ) -> None:
        """``node``'s report, written ``age`` seconds before ``now``: every device at ``util``%,
        ``memory`` of 80 GiB used, ``sick`` devices unhealthy with that problem, ``pods`` by device
        (pod names in "ns")."""
        sick, pods = sick or {}, pods or {}
        devs = tuple(
            DeviceReport(
                index=i,
                healthy=i not in sick,
                problems=(sick[i],) if i in sick else (),
                utilization=util,
                memory_used=int(memory * 80 * 2**30),
                memory_total=80 * 2**30,
                pods=frozenset(("ns", p) for p in pods.get(i, ())),
            )
            for i in range(devices)
        )
        assert self.scheduler.indices is not None
        reports: Any = self.scheduler.indices.reports
        reports[node] = [ReportView(node, now - dt.timedelta(seconds=age), devs)]

    def workload(self, job: str, attempt: int, **kw: Any) -> None:
        name = f"{job}-a{attempt}"
        self.workloads[("ns", name)] = [WorkloadView("ns", name, ("ns", job), attempt, **kw)]

    def snapshot(self, now: dt.datetime = T0) -> Snapshot:
        snap = self.scheduler.observe(now)
        plans = {}
        for key, job in snap.jobs.items():
            plan = self.scheduler.plans.plan(job, snap)
            if plan is not None:
                plans[key] = plan
        from dataclasses import replace

        return replace(snap, plans=plans)
