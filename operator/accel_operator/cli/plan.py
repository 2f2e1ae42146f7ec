"""``accelctl plan JOB.yaml``: where the planner would run a job, and why not elsewhere.

``accelctl plan NAME`` (or ``kubectl accel plan NAME``), for a job already in the cluster: the
plan and alternatives the operator wrote in its status (``--kubeconfig``, ``--context``, ``-n``).

Prints every pool's best placement (``--all``: every pool × device count) with per-device
memory, step time, duration and cost, then the decision. ``-o json`` prints the stable contract
``{"job": ..., "candidates": [...], "decision": {...}}``. Exit status 0 for any valid plan,
schedulable or not (the decision says which); 2 for invalid input.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from accel_api import InvalidResource, bounds, catalog
from accel_api.enums import CapacityType
from accel_api.job import AcceleratorJob
from accel_api.pool import AcceleratorPool
from accel_operator.cli import inputs, kubeopts, render
from accel_operator.planning import candidates, selection

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
NAME = "plan"
HELP = (
    "Plan an AcceleratorJob: memory, speed and cost on each pool and device count, and the choice. "
    "Without --pools: one on-demand and one spot pool per catalog accelerator (catalog devices per node, "
    f"up to {selection.DEFAULT_MAX_NODES} nodes, catalog list prices). Exit 0 for a valid plan even when "
    "nothing can run it (see decision.schedulable); exit 2 for invalid input."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "job",
        metavar="JOB.yaml|NAME",
        help="file holding one AcceleratorJob (- for stdin), or the name of a job in the cluster (its status's plan)",
    )
    parser.add_argument(
        "--pools",
        action="append",
        default=[],
        metavar="POOLS.yaml",
        help="AcceleratorPool resources to choose from (repeatable); default: one on-demand and one spot pool "
        "per catalog accelerator",
    )
    parser.add_argument(
        "--catalog", metavar="FILE", help="accelerator catalog YAML overriding or adding to the shipped one"
    )
    parser.add_argument(
        "-o", "--output", choices=("table", "wide", "json", "yaml"), default="table", help="wide: as --all"
    )
    parser.add_argument("--accelerator", metavar="ID", help="evaluate one placement: this catalog accelerator ...")
    parser.add_argument("--devices", type=int, metavar="N", help="... with this many devices (needs --accelerator)")
    parser.add_argument("--spot", action="store_true", help="with --accelerator: price the placement as spot")
    parser.add_argument("--all", action="store_true", help="table: every pool × device count, not each pool's best")
    kubeopts.add_arguments(parser, all_namespaces=False)


def in_cluster(arg: str) -> bool:
    """Whether ``arg`` names a job in the cluster rather than a file: no such path, no folder or
    file extension in it, and shaped as an object name."""
    if arg == "-" or Path(arg).exists() or "/" in arg or arg.endswith((".yaml", ".yml", ".json")):
        return False
    return bool(_NAME.match(arg))


def _usage(message: str) -> Exception:
    from accel_operator.cli.errors import UsageError

    return UsageError(message)


def _job(path: str) -> AcceleratorJob:
    resources = inputs.read_resources(path)
    jobs = [r for r in resources if isinstance(r, AcceleratorJob)]
    if not jobs:
        kinds = ", ".join(sorted({type(r).__name__ for r in resources}))
        raise InvalidResource([f"(document): expected an AcceleratorJob, found {kinds}"], path)
    if len(jobs) > 1:
        names = ", ".join(j.metadata.name or "(unnamed)" for j in jobs)
        raise _usage(f"{path}: (document): holds {len(jobs)} AcceleratorJobs ({names}); plan one file per job")
    return jobs[0]


def _pools(paths: list[str]) -> list[candidates.PoolOffer]:
    offers: list[candidates.PoolOffer] = []
    for path in paths:
        found = [r for r in inputs.read_resources(path) if isinstance(r, AcceleratorPool)]
        if not found:
            raise InvalidResource(["(document): expected AcceleratorPool resources, found none"], path)
        for i, pool in enumerate(found):
            offers.append(candidates.PoolOffer(name=pool.metadata.name or f"{path}#{i + 1}", spec=pool.spec))
    return offers


def run(args: argparse.Namespace) -> int:
    if in_cluster(args.job):
        from accel_operator.cli import jobs

        return jobs.plan_from_cluster(args)
    if (args.accelerator is None) != (args.devices is None):
        raise _usage("--accelerator and --devices go together")
    if args.devices is not None and not 1 <= args.devices <= bounds.DEVICES:
        raise _usage(f"--devices must be between 1 and {bounds.DEVICES} (got {args.devices})")
    if args.accelerator is not None and args.pools:
        raise _usage("--accelerator/--devices evaluate one placement without pools; drop --pools")
    if args.spot and args.accelerator is None:
        raise _usage("--spot needs --accelerator and --devices")
    try:
        cat = catalog.load(args.catalog)
    except catalog.CatalogError as exc:
        message = str(exc)
        shown = message if len(message) <= 300 else message[:299] + f"… ({len(message)} chars)"
        raise _usage(f"--catalog: {shown}") from None
    job = _job(args.job)
    name = job.metadata.name
    if args.accelerator is not None:
        capacity = CapacityType.SPOT if args.spot else CapacityType.ON_DEMAND
        result = selection.evaluate(job.spec, args.accelerator, args.devices, cat, capacity_type=capacity, name=name)
    else:
        offers = _pools(args.pools) if args.pools else list(selection.default_pools(cat))
        result = selection.plan(job.spec, offers, cat, name=name)
    if args.output == "json":
        json.dump(render.plan_json(result, job.metadata.namespace), sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
    elif args.output == "yaml":
        import yaml

        print(yaml.safe_dump(render.plan_json(result, job.metadata.namespace), sort_keys=False), end="")
    else:
        print(render.plan_table(result, args.all or args.output == "wide"))
    return 0
