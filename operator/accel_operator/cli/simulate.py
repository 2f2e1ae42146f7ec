"""``accelctl simulate``: what a trace of jobs would cost, and how late it would run, under a
strategy: the real engine on a virtual clock over a simulated cluster (docs/simulate.md).

``accelctl simulate --trace TRACE.jsonl --pools POOLS.yaml [--seed N] [--strategy engine]
[--strategy on-demand] [--strategy ordered-flavors] [--policy POLICY.yaml ...] -o table|json|html``
replays the trace once per strategy, same seed, and prints the figures side by side; each
``--policy`` file (AcceleratorPolicies) is one more engine strategy, named after its policies.
``accelctl simulate generate --jobs N --days D --seed S -o FILE`` writes a synthetic trace.
Exit 0 done; 2 invalid input (each problem names the line and field).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from accel_operator.cli import simhtml
from accel_operator.cli.errors import UsageError
from accel_operator.cli.progress import Progress
from accel_operator.engine import collector
from accel_operator.simulate import figures, generate, replay, runner, trace

NAME = "simulate"
HELP = (
    "Replay a trace of jobs (JSON lines) through the real engine on a virtual clock, per strategy "
    "(engine, on-demand, ordered-flavors): cost, spot savings, preemption losses, delays, deadlines, "
    "utilization, jobs failed for memory."
)
MAX_TRACE_BYTES = 64 * 2**20  # a trace larger than this is refused unread
MAX_POLICY_FILES = 8
MAX_WORKERS = 64


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="simulate_command", required=False, metavar="ACTION")
    gen = sub.add_parser("generate", help="write a synthetic trace (shaped after the Philly and PAI studies)")
    gen.add_argument("--jobs", type=int, required=True, help=f"how many jobs (1 to {generate.MAX_JOBS})")
    gen.add_argument("--days", type=float, default=30.0, help=f"over how many days (at most {generate.MAX_DAYS})")
    gen.add_argument("--seed", type=int, default=1)
    gen.add_argument("-o", "--out", metavar="FILE", required=True, help="where to write the trace ('-': stdout)")
    parser.add_argument("--trace", metavar="FILE", help="the trace: JSON lines, one job per line")
    parser.add_argument("--pools", metavar="FILE", help="the AcceleratorPools (YAML or JSON, multi-document)")
    parser.add_argument(
        "--seed", type=int, default=1, help="the seed of every draw (preemptions): same seed, same figures"
    )
    parser.add_argument(
        "--strategy",
        action="append",
        choices=sorted(replay.STRATEGIES),
        help="repeat for side by side (default: engine, on-demand and ordered-flavors)",
    )
    parser.add_argument(
        "--policy",
        action="append",
        metavar="FILE",
        help="AcceleratorPolicies (YAML, multi-document) in force for one more engine strategy, named after "
        f"them; repeat for side by side (at most {MAX_POLICY_FILES})",
    )
    parser.add_argument(
        "--spot-prices",
        metavar="FILE",
        help="CSV time,pool,price: a pool's price (USD per device-hour; the spot price on a spot pool) from that "
        "second of the trace on",
    )
    parser.add_argument(
        "--interruptions",
        metavar="FILE",
        help="CSV time,pool,nodes: recorded interruptions (that many busy nodes of the pool at that second); a "
        "pool named here has no Poisson preemptions",
    )
    parser.add_argument(
        "--warning",
        action="append",
        metavar="POOL=SECONDS",
        help="a pool's early-warning lead time before an interruption (a job with a checkpoint saves then)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="replay up to N strategies at once, each in its own process (default: all of them, at most twice "
        "the CPUs; 1: one after the other in this process); the figures do not depend on it",
    )
    parser.add_argument("-o", "--output", choices=("table", "json", "html"), default="table")


def _read(path: str, what: str, limit: int) -> str:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{what} {path}: no such file")
    if p.stat().st_size > limit:
        raise UsageError(f"{what} {path}: larger than {limit // 2**20} MiB")
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{what} {path}: cannot read ({exc})") from None


def _generate(args: argparse.Namespace) -> int:
    try:
        lines = generate.generate(args.jobs, args.days, args.seed)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    text = generate.to_jsonl(lines)
    if args.out == "-":
        sys.stdout.write(text)
    else:
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"wrote {len(lines)} jobs over {args.days:g} days (seed {args.seed}) to {args.out}", file=sys.stderr)
    return 0


def _recorded(args: argparse.Namespace, pools: set[str]) -> replay.Recorded:
    """The recorded series and lead times the options name (nothing drawn is replaced without)."""
    prices: tuple[trace.Point, ...] = ()
    interruptions: tuple[trace.Point, ...] = ()
    if args.spot_prices:
        text = _read(args.spot_prices, "--spot-prices", 16 * 2**20)
        prices = tuple(trace.read_series(text, "price", pools, source=args.spot_prices))
    if args.interruptions:
        text = _read(args.interruptions, "--interruptions", 16 * 2**20)
        interruptions = tuple(trace.read_series(text, "nodes", pools, source=args.interruptions))
    warning = trace.read_lead_times(args.warning or [], pools)
    return replay.Recorded(prices, interruptions, warning)


def _policy_strategies(paths: list[str], taken: set[str]) -> list[replay.Strategy]:
    """One engine strategy per ``--policy`` file, named after its policies (``a+b`` for two)."""
    if len(paths) > MAX_POLICY_FILES:
        raise UsageError(f"--policy: {len(paths)} files; at most {MAX_POLICY_FILES}")
    out = []
    for path in paths:
        found = trace.read_policies(_read(path, "--policy", 4 * 2**20), source=path)
        name = "+".join(p.metadata.name or "" for p in found)
        if len(name) > 80:
            name = name[:79] + "…"
        if name in taken:
            raise trace.TraceError(
                [
                    f"{path}: metadata.name: strategy {name!r} is already run (another --policy file or a built-in "
                    "strategy has that name); rename the policy"
                ]
            )
        taken.add(name)
        out.append(replay.Strategy(name, policies=tuple(found)))
    return out


def run(args: argparse.Namespace) -> int:
    if args.simulate_command == "generate":
        return _generate(args)
    if not args.trace or not args.pools:
        raise UsageError("simulate needs --trace FILE and --pools FILE (or: accelctl simulate generate ...)")
    try:
        arrivals, disruptions = trace.read_trace_events(
            _read(args.trace, "--trace", MAX_TRACE_BYTES), source=args.trace
        )
        pools = trace.read_pools(_read(args.pools, "--pools", 4 * 2**20), source=args.pools)
        strategies = [replay.STRATEGIES[n] for n in args.strategy or ["engine", "on-demand", "ordered-flavors"]]
        strategies += _policy_strategies(args.policy or [], {s.name for s in strategies})
        recorded = _recorded(args, {p.metadata.name or "" for p in pools})
    except trace.TraceError as exc:
        raise UsageError("\n".join(exc.problems[:21])) from None
    # By default every strategy at once, up to twice the CPUs: the replays are of unequal length,
    # and three on two cores end together (the CPU time over the cores) where two at a time
    # leave the third to run alone.
    workers = args.workers if args.workers is not None else min(len(strategies), 2 * (os.cpu_count() or 1))
    if not 1 <= workers <= MAX_WORKERS:
        raise UsageError(f"--workers: must be 1 to {MAX_WORKERS}")
    options = {"seed": args.seed, "disruptions": disruptions, "recorded": recorded}
    collector.tune()  # the engine's heap, as in the operator (forked workers inherit it)
    with Progress("simulate") as bar:  # on stderr: -o json stays the document
        rows = runner.run(runner.Replays(pools, arrivals, strategies, options), workers=workers, bar=bar)
    if args.output == "html":
        print(simhtml.render(rows, trace=args.trace, seed=args.seed), end="")
    elif args.output == "json":
        print(json.dumps({"trace": args.trace, "seed": args.seed, "strategies": rows}, indent=2))
    else:
        print(figures.table(rows))
    return 0
