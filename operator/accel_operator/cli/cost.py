"""``accelctl cost report``: what teams, jobs or pools spent, read from the cluster (the jobs'
ledgers in ``status.cost``, the policies' budgets in ``status.spend``).

``-o table|csv|json|yaml`` print rows (spent, lost to preemption, idle, the on-demand equivalent, spot
savings, device-hours, jobs in the window; and, labelled as such, the whole jobs' spending to
date and the planner's forecast for the whole job), a totals row, the period and the currency,
and where every price came from (the catalog's ``asOf``/``source``, the pool's own figure, or the
live adapter); ``-o focus`` writes the FinOps FOCUS 1.1 CSV (:mod:`accel_operator.accounting.focus`);
``-o html`` writes one self-contained file with charts (see :mod:`accel_operator.cli.costhtml`).
``--from-file`` reads a List of AcceleratorJobs (and AcceleratorPolicies, AcceleratorPools, and the
rollup's ConfigMap) from YAML instead of the cluster. As kubectl: ``-n`` reads one namespace
(default: the kubeconfig context's), ``-A`` all of them; ``--from-file`` reads every namespace in
the file unless ``-n`` names one. Deleted jobs count from the operator's durable cost rollup (the
ConfigMap ``--rollup`` in ``--rollup-namespace``), so a 30-day report includes the jobs deleted in
those days. Work over many jobs shows its progress on stderr (:mod:`accel_operator.cli.progress`).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from accel_api import catalog as catalogs
from accel_api import durations, loader
from accel_api.costrollup import CostRollup
from accel_api.job import CostStatus
from accel_api.policy import AcceleratorPolicyStatus
from accel_api.pool import AcceleratorPoolSpec
from accel_operator.accounting import costreport, focus, pricesources
from accel_operator.accounting.costreport import By, JobCost
from accel_operator.accounting.pricesources import CURRENCY, Pool, PriceLine
from accel_operator.accounting.report import Report
from accel_operator.cli import kubeopts
from accel_operator.cli.errors import UsageError
from accel_operator.cli.progress import Progress

NAME = "cost"
HELP = "Cost per team, job or pool from the jobs' ledgers: accelctl cost report --by team --since 30d -o table."
MAX_SINCE_SECONDS = 366 * 86400.0


SKIPPED_SHOWN = 10  # jobs left out of a report named one by one; the rest counted


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="cost_command", required=True, metavar="ACTION")
    report = sub.add_parser("report", help="spent, lost to preemption, idle, spot savings, forecast vs actual")
    report.add_argument("--by", choices=[b.value for b in By], default=By.TEAM.value)
    report.add_argument("--since", default="30d", help="the window, ending now: e.g. 24h, 7d, 30d (at most 366d)")
    report.add_argument(
        "-o",
        "--output",
        choices=("table", "csv", "json", "yaml", "html", "focus"),
        default="table",
        help="focus: the FinOps FOCUS 1.1 CSV, one row per job attempt and pool in the window",
    )
    report.add_argument("--out", metavar="FILE", help="html: where to write (default cost-report.html)")
    report.add_argument(
        "--catalog", metavar="FILE", help="the accelerator catalog the operator runs with, if not the shipped one"
    )
    kubeopts.add_arguments(report)
    report.add_argument("--from-file", metavar="FILE", help="read jobs and policies from YAML, not the cluster")
    report.add_argument(
        "--rollup", default="accel-cost-rollup", help="the operator's cost rollup ConfigMap (deleted jobs); '' for none"
    )
    report.add_argument("--rollup-namespace", default="accel-system", help="the namespace of --rollup")


def _objects(args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.from_file:
        docs = loader.load_documents(read_input(args.from_file, "--from-file"), source=args.from_file)
        out: list[dict[str, Any]] = []
        for doc in docs:
            if isinstance(doc, dict) and doc.get("kind") == "List":
                out.extend(i for i in doc.get("items") or [] if isinstance(i, dict))
            elif isinstance(doc, dict):
                out.append(doc)
        return out
    from accel_operator.adapters.kube import costs
    from accel_operator.adapters.kube.client import ClusterUnavailable

    api = kubeopts.client(args)
    try:
        out = costs.list_jobs(api, args.namespace) + costs.list_policies(api) + costs.list_pools(api)
        stored = costs.read_rollup(api, args.rollup_namespace, args.rollup) if args.rollup else None
    except ClusterUnavailable as exc:
        raise kubeopts.unreachable(exc) from exc
    except Exception as exc:  # a refused connection, a timeout: exit 1, no traceback
        raise kubeopts.unreachable(exc) from exc
    if stored is not None:
        out.append({"kind": ROLLUP_KIND, "rollup": stored})
    return out


ROLLUP_KIND = "accel.dev/CostRollup"  # an in-process marker for the rollup read from the cluster


def folded(objects: list[dict[str, Any]], name: str) -> CostRollup | None:
    """The cost rollup among ``objects``: read from the cluster, or its ConfigMap in a file."""
    for obj in objects:
        if obj.get("kind") == ROLLUP_KIND and isinstance(obj.get("rollup"), CostRollup):
            return obj["rollup"]  # type: ignore[no-any-return]
        meta = obj.get("metadata") or {}
        if obj.get("kind") == "ConfigMap" and name and meta.get("name") == name:
            from accel_operator.adapters.kube.client import ClusterUnavailable
            from accel_operator.adapters.kube.costs import parse_rollup

            data = obj.get("data")
            try:
                return parse_rollup(data if isinstance(data, dict) else None)
            except ClusterUnavailable as exc:
                raise UsageError(f"{name}: {exc}") from exc
    return None


def read_input(path: str, flag: str) -> str:
    """The text of ``path``, or a one-line UsageError naming the flag, the file and why."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{flag}: {path[:256]}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{flag}: {path[:256]}: is a folder, not a file") from None
    except PermissionError:
        raise UsageError(f"{flag}: {path[:256]}: not readable (permission denied)") from None
    except UnicodeDecodeError:
        raise UsageError(f"{flag}: {path[:256]}: not UTF-8 text") from None
    except OSError as exc:
        raise UsageError(f"{flag}: {path[:256]}: {exc.strerror or exc}") from None


def write_output(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, or a one-line UsageError naming the folder or file and why."""
    if not path.parent.is_dir():
        raise UsageError(f"--out: the folder {str(path.parent)[:256]} does not exist (create it first)")
    try:
        path.write_text(text, encoding="utf-8")
    except IsADirectoryError:
        raise UsageError(f"--out: {str(path)[:256]} is a folder: name a file") from None
    except OSError as exc:
        raise UsageError(f"--out: {str(path)[:256]}: {exc.strerror or exc}") from None


def job_costs(
    objects: list[dict[str, Any]],
    namespace: str | None = None,
    skipped: list[str] | None = None,
    progress: Progress | None = None,
) -> list[JobCost]:
    """The ledgers of the AcceleratorJobs among ``objects``. One whose team or ledger does not
    validate is left out and named in ``skipped`` (with why), never silently."""
    out = []
    for obj in objects:
        if obj.get("kind") != "AcceleratorJob":
            continue
        if progress is not None:
            progress.advance()
        meta = obj.get("metadata") or {}
        if namespace and meta.get("namespace") != namespace:
            continue
        raw = (obj.get("status") or {}).get("cost")
        team = (obj.get("spec") or {}).get("team")
        who = f"{str(meta.get('namespace', ''))[:63]}/{str(meta.get('name', ''))[:253]}"
        if raw is None:
            continue  # no ledger yet: nothing spent
        if not isinstance(raw, dict) or not isinstance(team, str):
            if skipped is not None:
                skipped.append(f"{who}: status.cost or spec.team is not readable")
            continue
        try:
            cost = CostStatus.model_validate(raw)
        except ValidationError as exc:
            if skipped is not None:
                skipped.append(f"{who}: status.cost does not validate ({exc.error_count()} problem(s))")
            continue
        out.append(
            JobCost(
                str(meta.get("namespace", ""))[:63],
                str(meta.get("name", ""))[:253],
                team[:63],
                cost,
                str(meta.get("uid", ""))[:128],
            )
        )
    return out


_M = TypeVar("_M", bound=BaseModel)


def _valid(
    objects: list[dict[str, Any]], kind: str, part: str, model: type[_M]
) -> Iterator[tuple[str, dict[str, Any], _M]]:
    """(name, object, its ``part`` parsed as ``model``) of the objects of ``kind``; one whose part
    does not validate is left out."""
    for obj in objects:
        if obj.get("kind") != kind:
            continue
        try:
            parsed = model.model_validate(obj.get(part) or {})
        except ValidationError:
            continue
        yield str((obj.get("metadata") or {}).get("name", ""))[:253], obj, parsed


def budgets(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for name, _obj, status in _valid(objects, "AcceleratorPolicy", "status", AcceleratorPolicyStatus):
        out.extend({"policy": name, **s.model_dump(by_alias=True, mode="json")} for s in status.spend)
    return out


def pools(objects: list[dict[str, Any]]) -> dict[str, Pool]:
    """The AcceleratorPools among ``objects`` (one that does not validate is left out: its prices'
    source is then reported unknown)."""
    out: dict[str, Pool] = {}
    for name, obj, spec in _valid(objects, "AcceleratorPool", "spec", AcceleratorPoolSpec):
        conditions = (obj.get("status") or {}).get("conditions") or []
        live = next((c for c in conditions if isinstance(c, dict) and c.get("type") == "PriceLive"), None)
        out[name] = Pool(spec, live)
    return out


def _catalog(path: str | None) -> catalogs.Catalog:
    try:
        return catalogs.load(path)
    except catalogs.CatalogError as exc:
        raise UsageError(f"--catalog: {str(exc)[:400]}") from None


def run(args: argparse.Namespace) -> int:
    try:
        seconds = durations.parse_seconds(args.since)
    except ValueError as exc:
        raise UsageError(f"--since: {exc}") from exc
    if not 0 < seconds <= MAX_SINCE_SECONDS:
        raise UsageError(f"--since: must be more than 0s and at most 366d (got {args.since[:40]!r})")
    now = dt.datetime.now(dt.UTC)
    start = now - dt.timedelta(seconds=seconds)
    if args.from_file:  # a file is read whole unless -n names a namespace
        if args.namespace and args.all_namespaces:
            raise UsageError("-n/--namespace and -A/--all-namespaces exclude each other: give one")
        args.namespace = args.namespace or None
    else:
        args.namespace = kubeopts.namespace(args)
    with Progress("cost report") as progress:
        progress.step("reading jobs, policies and pools" + (" from the file" if args.from_file else ""))
        objects = _objects(args)
        skipped: list[str] = []
        progress.step("reading the jobs' ledgers", total=sum(1 for o in objects if o.get("kind") == "AcceleratorJob"))
        jobs = job_costs(objects, args.namespace, skipped, progress)
        progress.step(f"summing {len(jobs):,} ledgers by {args.by}")
        report = _report(args, objects, jobs, (start, now))
    for line in skipped[:SKIPPED_SHOWN]:
        print(f"warning: left out of the report: {line}", file=sys.stderr)
    if len(skipped) > SKIPPED_SHOWN:
        print(f"warning: {len(skipped) - SKIPPED_SHOWN} more jobs left out of the report", file=sys.stderr)
    return _write(args, report)


WHOLE_JOB_NOTE = costreport.WHOLE_JOB_NOTE


def _report(
    args: argparse.Namespace,
    objects: list[dict[str, Any]],
    jobs: list[JobCost],
    window: tuple[dt.datetime, dt.datetime],
) -> Report:
    start, now = window
    stored = folded(objects, args.rollup)
    one_namespace = stored is not None and bool(args.namespace)
    if stored is not None and args.namespace:  # only this namespace's deleted jobs: no team or pool buckets
        stored = _only_namespace(stored, args.namespace)
    by = By(args.by)
    rows = costreport.rows(jobs, by, start, now, stored, buckets_hold_live=not one_namespace)
    known = pools(objects)
    prices = pricesources.lines(jobs, window, known, _catalog(args.catalog), stored)
    report = Report(by=by, window=window, rows=rows, prices=prices, budgets=budgets(objects), namespace=args.namespace)
    report.jobs, report.folded, report.pools = jobs, stored, known
    return report


def _write(args: argparse.Namespace, report: Report) -> int:
    start, now = report.window
    if args.output == "html":
        from accel_operator.cli import costhtml

        out = Path(args.out or "cost-report.html")
        write_output(out, costhtml.render(report))
        print(f"wrote {out} ({out.stat().st_size // 1024} KiB; open it in a browser, it needs no network)")
        return 0
    if args.output == "focus":
        writer = csv.DictWriter(sys.stdout, fieldnames=focus.COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(focus.rows(report.jobs, report.window, report.pools, report.folded))
        return 0
    table = [r.as_dict() for r in report.rows]
    if args.output in ("json", "yaml"):
        data = {
            "by": report.by.value,
            "since": start.isoformat(),
            "until": now.isoformat(),
            "period": {"from": focus.stamp(start), "to": focus.stamp(now)},
            "currency": CURRENCY,
            "namespace": report.namespace,  # None: every namespace
            "rows": table,
            "total": report.total.as_dict(),
            "wholeJobNote": WHOLE_JOB_NOTE,
            "prices": [p.as_dict() for p in report.prices],
            "budgets": report.budgets,
        }
        if args.output == "yaml":
            import yaml

            print(yaml.safe_dump(data, sort_keys=False), end="")
        else:
            json.dump(data, sys.stdout, indent=2)
            print()
    elif args.output == "csv":
        extra = {"currency": CURRENCY, "periodFrom": focus.stamp(start), "periodTo": focus.stamp(now)}
        writer = csv.DictWriter(sys.stdout, fieldnames=[*costreport.COLUMNS, *extra], lineterminator="\n")
        writer.writeheader()
        writer.writerows({**r, **extra} for r in [*table, report.total.as_dict()])
    else:
        print(render_table(report))
    return 0


def _only_namespace(stored: CostRollup, namespace: str) -> CostRollup:
    """The rollup as one namespace sees it: its deleted jobs' summaries as daily buckets (the
    team buckets mix namespaces, so they are left out)."""
    from accel_api.costrollup import Bucket

    jobs = [j for j in stored.jobs if j.namespace == namespace]
    buckets = [
        Bucket(day=d.day, team=j.team, pool=d.pool, capacity_type=d.capacity_type, f=d.f) for j in jobs for d in j.days
    ]
    return CostRollup(buckets=buckets, jobs=jobs, pending=stored.pending, gone=stored.gone)


TABLE_HEADS = (
    "SPENT",
    "LOST(PREEMPT)",
    "IDLE",
    "ON-DEMAND",
    "SPOT SAVED",
    "DEV-H",
    "JOBS",
    "SPENT TO DATE*",
    "FORECAST*",
)


def render_table(report: Report) -> str:
    def cells(r: dict[str, Any]) -> list[str]:
        return [
            str(r["key"]),
            *(f"${float(r[k]):,.2f}" for k in costreport.WINDOW_MONEY),
            f"{float(r['deviceHours']):,.2f}",
            str(r["jobs"]),
            *(f"${float(r[k]):,.2f}" for k in costreport.WHOLE_JOB_MONEY),
        ]

    heads = [report.by.value.upper(), *TABLE_HEADS]
    lines = [cells(r.as_dict()) for r in report.rows]
    if report.rows:
        lines.append(cells(report.total.as_dict()))
    widths = [max(len(h), *(len(row[i]) for row in lines)) if lines else len(h) for i, h in enumerate(heads)]
    fmt = "  ".join(f"{{:<{w}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths))
    out = [report.period(), fmt.format(*heads), *(fmt.format(*row) for row in lines)]
    if not report.rows:
        out.append("(no spending in this window)")
    else:
        out.append(f"* {WHOLE_JOB_NOTE}")
    if report.prices:
        out.append("Prices (USD per device-hour, as the ledgers recorded them in the window):")
        out.extend(f"  {price_text(p)}" for p in report.prices)
    return "\n".join(out)


def price_text(p: PriceLine) -> str:
    span = (
        "-"
        if p.low is None or p.high is None
        else (f"${p.low:,.4f}" if p.low == p.high else f"${p.low:,.4f} to ${p.high:,.4f}")
    )
    line = f"{p.pool} ({p.capacity_type.value}, {p.accelerator or '?'}): {span}; {p.kind}: {p.source}; as of {p.as_of}"
    if p.capacity_type.value == "spot":
        line += f"; on-demand figure: {p.on_demand_source}, as of {p.on_demand_as_of}"
    return line
