"""``accelctl cost report``: what teams, jobs or pools spent, read from the cluster (the jobs'
ledgers in ``status.cost``, the policies' budgets in ``status.spend``).

``-o table|csv|json|yaml`` print rows (spent, lost to preemption, idle, the on-demand equivalent, spot
savings, the planner's forecast, device-hours, jobs); ``-o html`` writes one self-contained file
with charts (see :mod:`accel_operator.cli.costhtml`). ``--from-file`` reads a List of
AcceleratorJobs (and AcceleratorPolicies, and the rollup's ConfigMap) from YAML instead of the
cluster. As kubectl: ``-n`` reads one namespace (default: the kubeconfig context's), ``-A`` all
of them; ``--from-file`` reads every namespace in the file unless ``-n`` names one. Deleted jobs
count from the operator's durable cost rollup (the ConfigMap
``--rollup`` in ``--rollup-namespace``), so a 30-day report includes the jobs deleted in those days.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from accel_api import durations, loader
from accel_api.costrollup import CostRollup
from accel_api.job import CostStatus
from accel_api.policy import AcceleratorPolicyStatus
from accel_operator.accounting import costreport
from accel_operator.accounting.costreport import By, JobCost
from accel_operator.cli import kubeopts
from accel_operator.cli.errors import UsageError

NAME = "cost"
HELP = "Cost per team, job or pool from the jobs' ledgers: accelctl cost report --by team --since 30d -o table."
MAX_SINCE_SECONDS = 366 * 86400.0


SKIPPED_SHOWN = 10  # jobs left out of a report named one by one; the rest counted


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="cost_command", required=True, metavar="ACTION")
    report = sub.add_parser("report", help="spent, lost to preemption, idle, spot savings, forecast vs actual")
    report.add_argument("--by", choices=[b.value for b in By], default=By.TEAM.value)
    report.add_argument("--since", default="30d", help="the window, ending now: e.g. 24h, 7d, 30d (at most 366d)")
    report.add_argument("-o", "--output", choices=("table", "csv", "json", "yaml", "html"), default="table")
    report.add_argument("--out", metavar="FILE", help="html: where to write (default cost-report.html)")
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
        out = costs.list_jobs(api, args.namespace) + costs.list_policies(api)
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
    objects: list[dict[str, Any]], namespace: str | None = None, skipped: list[str] | None = None
) -> list[JobCost]:
    """The ledgers of the AcceleratorJobs among ``objects``. One whose team or ledger does not
    validate is left out and named in ``skipped`` (with why), never silently."""
    out = []
    for obj in objects:
        if obj.get("kind") != "AcceleratorJob":
            continue
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


def budgets(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for obj in objects:
        if obj.get("kind") != "AcceleratorPolicy":
            continue
        try:
            status = AcceleratorPolicyStatus.model_validate(obj.get("status") or {})
        except ValidationError:
            continue
        name = str((obj.get("metadata") or {}).get("name", ""))[:253]
        out.extend({"policy": name, **s.model_dump(by_alias=True, mode="json")} for s in status.spend)
    return out


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
    objects = _objects(args)
    skipped: list[str] = []
    jobs = job_costs(objects, args.namespace, skipped)
    for line in skipped[:SKIPPED_SHOWN]:
        print(f"warning: left out of the report: {line}", file=sys.stderr)
    if len(skipped) > SKIPPED_SHOWN:
        print(f"warning: {len(skipped) - SKIPPED_SHOWN} more jobs left out of the report", file=sys.stderr)
    stored = folded(objects, args.rollup)
    one_namespace = stored is not None and bool(args.namespace)
    if stored is not None and args.namespace:  # only this namespace's deleted jobs: no team or pool buckets
        stored = _only_namespace(stored, args.namespace)
    by = By(args.by)
    rows = costreport.rows(jobs, by, start, now, stored, buckets_hold_live=not one_namespace)
    if args.output == "html":
        from accel_operator.cli import costhtml

        out = Path(args.out or "cost-report.html")
        write_output(out, costhtml.render(jobs, rows, by, (start, now), budgets(objects), folded=stored))
        print(f"wrote {out} ({out.stat().st_size // 1024} KiB; open it in a browser, it needs no network)")
        return 0
    table = [r.as_dict() for r in rows]
    if args.output in ("json", "yaml"):
        data = {
            "by": by.value,
            "since": start.isoformat(),
            "until": now.isoformat(),
            "namespace": args.namespace,  # None: every namespace
            "rows": table,
            "budgets": budgets(objects),
        }
        if args.output == "yaml":
            import yaml

            print(yaml.safe_dump(data, sort_keys=False), end="")
        else:
            json.dump(data, sys.stdout, indent=2)
            print()
    elif args.output == "csv":
        writer = csv.DictWriter(sys.stdout, fieldnames=costreport.COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(table)
    else:
        print(render_table(table, by))
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


def render_table(table: list[dict[str, Any]], by: By) -> str:
    heads = [by.value.upper(), "SPENT", "LOST(PREEMPT)", "IDLE", "ON-DEMAND", "SPOT SAVED", "FORECAST", "DEV-H", "JOBS"]
    lines = [
        [
            str(r["key"]),
            *(f"${r[k]:,.2f}" for k in costreport.COLUMNS[1:7]),
            f"{r['deviceHours']:,.2f}",
            str(r["jobs"]),
        ]
        for r in table
    ]
    if table:
        total = ["TOTAL", *(f"${sum(float(r[k]) for r in table):,.2f}" for k in costreport.COLUMNS[1:7])]
        total += [f"{sum(float(r['deviceHours']) for r in table):,.2f}", str(sum(int(r["jobs"]) for r in table))]
        lines.append(total)
    widths = [max(len(h), *(len(row[i]) for row in lines)) if lines else len(h) for i, h in enumerate(heads)]
    fmt = "  ".join(f"{{:<{w}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths))
    out = [fmt.format(*heads), *(fmt.format(*row) for row in lines)]
    if not table:
        out.append("(no spending in this window)")
    return "\n".join(out)
