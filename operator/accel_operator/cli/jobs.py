"""Commands on one AcceleratorJob in the cluster: ``why`` (why it waits, or where it runs, in
sentences with the numbers the operator wrote in its status), ``resume`` (the ``accel.dev/resume``
annotation a Stopped job waits for), ``stop`` (the ``accel.dev/stop`` annotation: the operator
stops the job at a checkpoint, reconcile/job/user_stop.py), and ``plan NAME`` (the plan and
alternatives in its status).

Nothing here decides anything: it reads what the operator wrote (status phase, conditions, plan,
cost, health) and the AcceleratorPool it targets, and words it. A job that does not exist, or a
cluster that does not answer, is exit status 1 (as kubectl); a bad name or flag is 2.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from accel_api import vocabulary as v
from accel_operator.cli import colour, kubeopts
from accel_operator.cli.errors import RuntimeFailure, UsageError

T = TypeVar("T")
TEXT = 300  # the longest status text echoed in one sentence
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_PHASE_STYLE = {"Running": "green", "Succeeded": "green", "Failed": "red", "Unschedulable": "red", "Stopped": "yellow"}


def _clip(value: Any, limit: int = TEXT) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise UsageError(f"JOB: {_clip(name, 80)!r} is not an object name (lower-case letters, digits, '-' and '.')")
    return name


def _access(what: str, call: Callable[[], T]) -> T:
    """``call()``, its failures as one-line errors: not found / forbidden / the cluster unreachable."""
    from accel_operator.adapters.kube import jobaccess
    from accel_operator.adapters.kube.client import ClusterUnavailable

    try:
        return call()
    except jobaccess.NotFound:
        raise RuntimeFailure(f"{what} not found") from None
    except jobaccess.Forbidden as exc:
        raise RuntimeFailure(f"{what}: not allowed ({exc})") from None
    except ClusterUnavailable as exc:
        raise kubeopts.unreachable(exc) from None


def read_job(args: argparse.Namespace) -> tuple[Any, str, dict[str, Any]]:
    """(client, namespace, the AcceleratorJob ``args.job`` as the API server returns it)."""
    from accel_operator.adapters.kube import jobaccess

    name = check_name(args.job)
    ns = kubeopts.namespace(args) or kubeopts.DEFAULT_NAMESPACE
    api = kubeopts.client(args)
    job = _access(f"acceleratorjob {name} in namespace {ns}", lambda: jobaccess.get_job(api, ns, name))
    return api, ns, job


def _pool(api: Any, name: str) -> dict[str, Any] | None:
    """The AcceleratorPool ``name``, or None when it cannot be read (gone, or not allowed)."""
    from accel_operator.adapters.kube import jobaccess
    from accel_operator.adapters.kube.client import ClusterUnavailable

    try:
        return jobaccess.get_pool(api, name)
    except (jobaccess.NotFound, jobaccess.Forbidden, ClusterUnavailable):
        return None  # the sentence about the pool is left out; the rest still helps


def _nodes(api: Any, ns: str, name: str) -> list[str]:
    from accel_operator.adapters.kube import jobaccess
    from accel_operator.adapters.kube.client import ClusterUnavailable

    try:
        return jobaccess.job_nodes(api, ns, name)
    except (jobaccess.NotFound, jobaccess.Forbidden, ClusterUnavailable):
        return []


def _hours(seconds: Any) -> str:
    s = float(seconds)
    return f"{s / 3600:.1f}h" if s >= 3600 else f"{s / 60:.0f}min"


def explain(job: dict[str, Any], pool: dict[str, Any] | None = None, nodes: list[str] | None = None) -> list[str]:
    """Sentences saying why ``job`` waits or where it runs, from its status (and its pool's)."""
    meta = job.get("metadata") or {}
    who = f"{_clip(meta.get('namespace', ''), 63)}/{_clip(meta.get('name', ''), 253)}"
    st = job.get("status") or {}
    if not st.get("phase"):
        return [f"{who} has no status yet: the operator has not seen it (is it running, and watching this namespace?)."]
    out = [f"{who} is {_clip(st['phase'], 40)} (attempt {int(st.get('attempt') or 0)})."]
    if st.get("message"):
        out.append(f"The operator says: {_clip(st['message'])}.")
    for c in st.get("conditions") or []:
        if not isinstance(c, dict):
            continue
        state = "yes" if c.get("status") == "True" else "no"
        line = f"{_clip(c.get('type', '?'), 40)}: {state}"
        if c.get("reason"):
            line += f" ({_clip(c['reason'], 60)})"
        if c.get("message") and c["message"] != st.get("message"):  # said once, above
            line += f": {_clip(c['message'])}"
        out.append(line + ".")
    plan = st.get("plan") or {}
    if plan.get("pool"):
        spot = "spot" if plan.get("spot") else str(plan.get("capacityType") or "on-demand")
        line = (
            f"Planned on pool {_clip(plan['pool'], 253)}: {plan.get('devices', '?')} × "
            f"{_clip(plan.get('accelerator', '?'), 63)} on {plan.get('nodes', '?')} node(s), {spot}"
        )
        if plan.get("costUsd") is not None and plan.get("durationSeconds") is not None:
            line += f", about ${float(plan['costUsd']):,.2f} over {_hours(plan['durationSeconds'])}"
        out.append(line + ".")
    if plan.get("reason"):
        out.append(f"Why this plan: {_clip(plan['reason'])}.")
    for alt in plan.get("alternatives") or []:
        out.append(
            f"Not {_clip(alt.get('pool', '?'), 253)} ({alt.get('devices', '?')} × "
            f"{_clip(alt.get('accelerator', '?'), 63)}): {_clip(alt.get('reason', ''))}."
        )
    out += _left_out(plan.get("leftOut"))
    ps = (pool or {}).get("status") or {}
    if pool is not None and ps.get("totalDevices"):  # only a pool status someone wrote: no made-up zeros
        pool_name = _clip((pool.get("metadata") or {}).get("name", ""), 253)
        out.append(
            f"Pool {pool_name} has {int(ps.get('freeDevices') or 0)} of {int(ps.get('totalDevices') or 0)} "
            f"devices free, {int(ps.get('wholeFreeNodes') or 0)} whole node(s) free, "
            f"{int(ps.get('readyNodes') or 0)} of {int(ps.get('nodes') or 0)} node(s) ready."
        )
    cost = st.get("cost") or {}
    over = cost.get("overBudget") or {}
    if over:
        limit = float(over.get("limitUsd") or 0)
        out.append(
            f"Over budget: policy {_clip(over.get('policy', '?'), 253)} allows ${limit:,.2f} per "
            f"{_clip(over.get('period', '?'), 20)}, and ${float(over.get('spentUsd') or 0):,.2f} is spent "
            f"(since {_clip(over.get('since', '?'), 40)})."
        )
    if cost:
        line = f"Spent so far: ${float(cost.get('spentUsd') or 0):,.2f}"
        if cost.get("forecastUsd") is not None:
            line += f" (the plan's forecast for the whole job: ${float(cost['forecastUsd']):,.2f})"
        out.append(line + ".")
    failure = st.get("lastFailure") or {}
    if failure:
        said = f": {_clip(failure['message'])}" if failure.get("message") else ""
        out.append(
            f"Attempt {failure.get('attempt', '?')} ended: {_clip(failure.get('kind', '?'), 40)} "
            f"{_clip(failure.get('reason', ''), 60)}{said}."
        )
    if st.get("phase") == "Stopped":
        out.append(f"To resume it from its latest checkpoint: kubectl accel resume {_clip(meta.get('name', ''), 253)}.")
    if st.get("workload"):
        line = f"It runs as the batch Job {_clip(st['workload'], 253)}"
        out.append(line + (f" on node(s) {', '.join(_clip(n, 253) for n in nodes)}." if nodes else "."))
    return out


def _left_out(left: Any) -> list[str]:
    """``status.plan.leftOut`` in sentences: per reason, how many pools and the first names (the
    status keeps at most 5 names and 8 reasons; what is past them is counted)."""
    if not isinstance(left, dict) or not left.get("count"):
        return []
    out, counted = [], 0
    for r in (left.get("byReason") or [])[:8]:
        if not isinstance(r, dict):
            continue
        count = int(r.get("count") or 0)
        names = [_clip(n, 253) for n in (r.get("pools") or [])[:5]]
        shown = ", ".join(names) + (f" and {count - len(names)} more" if count > len(names) else "")
        out.append(f"Left out by the placement: {count} pool(s) ({shown}): {_clip(r.get('reason', ''))}.")
        counted += count
    if int(left["count"]) > counted:
        out.append(f"Left out by the placement: {int(left['count']) - counted} more pool(s) for other reasons.")
    return out


def _dump(data: Any, output: str) -> None:
    if output == "yaml":
        import yaml

        print(yaml.safe_dump(data, sort_keys=False), end="")
    else:
        json.dump(data, sys.stdout, indent=2)
        print()


class Why:
    NAME = "why"
    HELP = "Why a job waits, or where it runs: its status conditions, plan, pool capacity and budget, in sentences."

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("job", metavar="JOB", help="the AcceleratorJob's name")
        parser.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
        kubeopts.add_arguments(parser, all_namespaces=False)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        api, ns, job = read_job(args)
        plan = (job.get("status") or {}).get("plan") or {}
        pool = _pool(api, str(plan["pool"])) if plan.get("pool") else None
        nodes = _nodes(api, ns, args.job) if (job.get("status") or {}).get("workload") else []
        lines = explain(job, pool, nodes)
        if args.output != "table":
            st = job.get("status") or {}
            _dump({"job": f"{ns}/{args.job}", "phase": st.get("phase"), "why": lines, "nodes": nodes}, args.output)
            return 0
        phase = str((job.get("status") or {}).get("phase") or "")
        first = lines[0]
        if phase in _PHASE_STYLE:
            first = first.replace(f" is {phase} ", f" is {colour.paint(phase, _PHASE_STYLE[phase], sys.stdout)} ", 1)
        print("\n".join([first, *lines[1:]]))
        return 0


def _job_arguments(parser: argparse.ArgumentParser) -> None:
    """JOB and the cluster flags: what ``resume`` and ``stop`` take."""
    parser.add_argument("job", metavar="JOB", help="the AcceleratorJob's name")
    kubeopts.add_arguments(parser, all_namespaces=False)


def _request(api: Any, ns: str, name: str, annotation: str, verb: str) -> int:
    """A user's request to the operator: ``annotation`` set to a new value (a timestamp)."""
    from accel_operator.adapters.kube import jobaccess

    token = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    _access(
        f"acceleratorjob {name} in namespace {ns}",
        lambda: jobaccess.annotate_job(api, ns, name, {annotation: token}),
    )
    print(f"acceleratorjob {name} {verb} requested ({annotation}={token})")
    return 0


class Resume:
    NAME = "resume"
    HELP = f"Resume a Stopped job (by a user, or by a policy for idleness): sets {v.ANNOTATION_RESUME} anew."

    add_arguments = staticmethod(_job_arguments)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        api, ns, job = read_job(args)
        phase = (job.get("status") or {}).get("phase")
        if phase != "Stopped":
            raise RuntimeFailure(
                f"acceleratorjob {args.job} in namespace {ns} is {_clip(phase or 'not yet planned', 40)}, not Stopped: "
                "nothing to resume"
            )
        return _request(api, ns, args.job, v.ANNOTATION_RESUME, "resume")


class Stop:
    NAME = "stop"
    HELP = (
        f"Stop a job: sets its {v.ANNOTATION_STOP} annotation to a new value. A running job with a checkpoint is "
        "asked to save one and ended (within the operator's checkpoint grace); the job is Stopped until `resume`."
    )

    add_arguments = staticmethod(_job_arguments)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        api, ns, job = read_job(args)  # a typo in the name is said first, as kubectl would
        phase = (job.get("status") or {}).get("phase")
        if phase in ("Stopped", "Succeeded", "Failed"):
            raise RuntimeFailure(f"acceleratorjob {args.job} in namespace {ns} is {phase}: nothing to stop")
        return _request(api, ns, args.job, v.ANNOTATION_STOP, "stop")


def plan_from_cluster(args: argparse.Namespace) -> int:
    """``plan NAME``: the plan and alternatives the operator wrote in the job's status."""
    _, ns, job = read_job(args)
    plan = (job.get("status") or {}).get("plan")
    if args.output in ("json", "yaml"):
        _dump({"job": f"{ns}/{args.job}", "plan": plan}, args.output)
        return 0
    if not plan:
        print(f"{ns}/{args.job} has no plan yet (phase {(job.get('status') or {}).get('phase') or 'none'}).")
        return 0
    lines = [ln for ln in explain(job) if ln.startswith(("Planned on", "Why this plan", "Not ", "Left out"))]
    print("\n".join(lines) or f"{ns}/{args.job}: no placement ({_clip(plan.get('reason', ''))}).")
    return 0
