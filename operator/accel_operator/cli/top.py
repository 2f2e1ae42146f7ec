"""``top``: per running job, what its devices do now — utilization and memory from the node
reports, the money its idle devices cost by the hour, and one line saying why the devices are
not busy (``reconcile/nodes/diagnose.py``, from the agents' profiling counters).

Nothing here decides anything, and the figures are the operator's own: a job's devices are those
the fresh node reports map to its pods of the current attempt (``ReportView.devices_of``, as the
accountant reads them), the idle share is the accountant's (``accounting.accrual.idle_fraction``:
devices at or under 1% utilization), and the price is the one the accountant last charged the
attempt at (its ledger's latest interval). Idle money now = price × planned devices × idle share.

:func:`rows` is pure (wire dicts and ``now`` in, rows out); :class:`Top` reads the cluster and prints.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from accel_operator.accounting import accrual
from accel_operator.cli import kubeopts
from accel_operator.cli.jobs import _access, _clip, _dump
from accel_operator.reconcile.common.reports import DeviceReport
from accel_operator.reconcile.common.snapshot import HOLDING
from accel_operator.reconcile.nodes import diagnose as dg
from accel_operator.settings import OperatorSettings

GIB = 1 << 30
# A report older than this says nothing about now: the operator's default (report_stale_seconds).
STALE_AFTER = float(OperatorSettings.model_fields["report_stale_seconds"].default)


@dataclass(frozen=True)
class Row:
    namespace: str
    name: str
    phase: str
    devices: int  # planned
    reported: int  # devices the fresh reports show for the job's pods
    nodes: tuple[str, ...]
    utilization: float | None  # mean GPU utilization of the reported devices, percent
    memory_used: int | None
    memory_total: int | None
    usd_per_device_hour: float | None  # the accountant's latest price for the attempt
    idle_fraction: float
    counters: dg.Counters | None  # the devices' mean profiling counters
    diagnosis: dg.Diagnosis

    @property
    def idle_usd_per_hour(self) -> float | None:
        if self.usd_per_device_hour is None:
            return None
        return self.usd_per_device_hour * self.devices * self.idle_fraction


def _price(cost: Any) -> float | None:
    """The price of the latest interval the accountant charged (the current attempt's, last)."""
    for attempt in reversed(getattr(cost, "attempts", None) or []):
        if attempt.intervals:
            return float(attempt.intervals[-1].usd_per_device_hour)
    return None


def rows(
    jobs: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    reports: Sequence[Mapping[str, Any]],
    *,
    now: dt.datetime,
    stale_after: float = STALE_AFTER,
) -> list[Row]:
    """One row per job holding devices (Admitted or Running), by namespace and name."""
    from accel_operator.adapters.kube import views  # the Kubernetes client comes with it: only when used
    from accel_operator.adapters.kube.reports import report_view

    by_node = {r.node: r for r in (report_view(body) for body in reports) if r is not None}
    pods_of: dict[tuple[str, str], list[Any]] = {}
    for body in pods:
        pod = views.pod_view(body)
        if pod is not None and pod.job is not None:
            pods_of.setdefault(pod.job, []).append(pod)
    out: list[Row] = []
    for body in jobs:
        job = views.job_view(body)
        if job.status.phase not in HOLDING:
            continue
        plan = job.status.plan
        planned = int(plan.devices or 0) if plan is not None else 0
        mine = pods_of.get(job.key, [])
        current = [p for p in mine if p.attempt == job.status.attempt and p.node and not p.ended]
        names = frozenset((p.namespace, p.name) for p in current)
        uids = frozenset(p.uid for p in current if p.uid)
        nodes = tuple(sorted({str(p.node) for p in current}))
        devices: list[DeviceReport] = []
        for node in nodes:
            report = by_node.get(node)
            if report is not None and report.fresh(now, stale_after):
                devices.extend(report.devices_of(names, uids))
        util = [d.utilization for d in devices if d.utilization is not None]
        used = [d.memory_used for d in devices if d.memory_used is not None]
        total = [d.memory_total for d in devices if d.memory_total is not None]
        counters = [dg.Counters.of(d.profile, d.utilization, d.utilization_memory) for d in devices]
        if devices:
            diagnosis = dg.diagnose(counters)
        elif nodes:
            diagnosis = dg.Diagnosis(
                dg.Verdict.UNKNOWN, f"no fresh node report shows its devices on {', '.join(nodes)}"
            )
        else:
            diagnosis = dg.Diagnosis(dg.Verdict.UNKNOWN, "its pods are not on a node yet")
        out.append(
            Row(
                namespace=job.namespace,
                name=job.name,
                phase=str(job.status.phase.value if job.status.phase else ""),
                devices=planned,
                reported=len(devices),
                nodes=nodes,
                utilization=fmean(util) if util else None,
                memory_used=sum(used) if used else None,
                memory_total=sum(total) if total else None,
                usd_per_device_hour=_price(job.status.cost),
                idle_fraction=accrual.idle_fraction(job, mine, by_node, planned, now=now, stale_after=stale_after),
                counters=dg.mean(counters),
                diagnosis=diagnosis,
            )
        )
    return sorted(out, key=lambda r: (r.namespace, r.name))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}%"


def _gib(used: int | None, total: int | None) -> str:
    if used is None:
        return "-"
    return f"{used / GIB:.0f}/{total / GIB:.0f}GiB" if total else f"{used / GIB:.0f}GiB"


def _money(x: float | None) -> str:
    return "-" if x is None else f"${x:,.2f}"


def _rate(x: float | None) -> str:
    return "-" if x is None else f"{x / 1e9:.1f}GB/s"


def row_json(r: Row) -> dict[str, Any]:
    c = r.counters
    return {
        "namespace": r.namespace,
        "name": r.name,
        "phase": r.phase,
        "devices": r.devices,
        "reportedDevices": r.reported,
        "nodes": list(r.nodes),
        "utilizationPercent": r.utilization,
        "memoryUsedBytes": r.memory_used,
        "memoryTotalBytes": r.memory_total,
        "usdPerDeviceHour": r.usd_per_device_hour,
        "idleFraction": r.idle_fraction,
        "idleUsdPerHour": r.idle_usd_per_hour,
        "counters": None
        if c is None
        else {
            "source": "gpm" if c.gpm else "basic",
            "smPercent": c.sm,
            "tensorPercent": c.tensor,
            "dramPercent": c.dram,
            "pcieBytesPerSecond": c.pcie,
            "nvlinkBytesPerSecond": c.nvlink,
        },
        "diagnosis": {"verdict": r.diagnosis.verdict.value, "line": r.diagnosis.line},
    }


def table(found: Sequence[Row], *, wide: bool, namespaces: bool) -> str:
    head = ["NAME", "DEVICES", "UTIL", "MEMORY", "IDLE($/H)"]
    if namespaces:
        head.insert(0, "NAMESPACE")
    if wide:
        head += ["PRICE($/DEV-H)", "IDLE", "SM", "TENSOR", "DRAM", "PCIE", "NVLINK", "NODES"]
    head.append("DIAGNOSIS")
    lines = [head]
    for r in found:
        c = r.counters
        cells = [_clip(r.name, 253), f"{r.reported}/{r.devices}", _pct(r.utilization)]
        cells += [_gib(r.memory_used, r.memory_total), _money(r.idle_usd_per_hour)]
        if namespaces:
            cells.insert(0, _clip(r.namespace, 63))
        if wide:
            cells += [_money(r.usd_per_device_hour), f"{r.idle_fraction:.0%}"]
            if c is None:
                cells += ["-"] * 5
            else:
                cells += [_pct(c.sm), _pct(c.tensor), _pct(c.dram), _rate(c.pcie), _rate(c.nvlink)]
            cells.append(",".join(_clip(n, 253) for n in r.nodes) or "-")
        cells.append(r.diagnosis.line)
        lines.append(cells)
    widths = [max(len(line[i]) for line in lines) for i in range(len(head) - 1)]
    return "\n".join(
        "   ".join(cell.ljust(w) for cell, w in zip(line[:-1], widths, strict=True)) + "   " + line[-1]
        for line in lines
    )


class Top:
    NAME = "top"
    HELP = (
        "Per running job: its devices' utilization and memory (node reports), the money its idle devices cost "
        "by the hour, and why the devices are not busy (idle, input-, communication-, memory-bandwidth- or "
        "compute-bound) from the agents' profiling counters."
    )

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("-o", "--output", choices=("table", "wide", "json", "yaml"), default="table")
        kubeopts.add_arguments(parser)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from accel_operator.adapters.kube import jobaccess

        ns = kubeopts.namespace(args)
        api = kubeopts.client(args)
        where = f"namespace {ns}" if ns else "any namespace"
        jobs = _access(f"acceleratorjobs in {where}", lambda: jobaccess.list_jobs(api, ns))
        pods = _access(f"pods in {where}", lambda: jobaccess.list_job_pods(api, ns))
        reports = _access("acceleratornodereports", lambda: jobaccess.list_node_reports(api))
        now = dt.datetime.now(dt.UTC)
        found = rows(jobs, pods, reports, now=now)
        if args.output in ("json", "yaml"):
            data = {"time": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "jobs": [row_json(r) for r in found]}
            _dump(data, args.output)
            return 0
        if not found:
            print(f"No running jobs in {where}.")
            return 0
        print(table(found, wide=args.output == "wide", namespaces=ns is None), file=sys.stdout)
        return 0
