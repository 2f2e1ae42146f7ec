"""``accel-cluster up|down|status|kubeconfig|nodes|autoscaler``: the local control plane for tests and the demo.

Dev tooling, with its own command: the product's ``accelctl`` never imports it.
"""

import argparse
import contextlib
import logging
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from accel_api import InvalidResource, load_documents, parse_resource
from accel_api.pool import AcceleratorPool
from accel_localcluster import ClusterError, autoscaler, default_cluster, kubeapi, nodes

HELP = "Start, stop or inspect the local control plane (real kube-apiserver, etcd, scheduler, KWOK nodes)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = sub.add_parser("up", help="build if needed, start, write the kubeconfig (idempotent)")
    up.add_argument("--no-build", action="store_true", help="use the binaries already built")
    up.add_argument("--timeout", type=float, default=240.0, help="seconds to wait for health (default 240)")
    down = sub.add_parser("down", help="stop every component and drop etcd's data")
    down.add_argument("--keep-data", action="store_true", help="keep etcd's data folder")
    sub.add_parser("status", help="each component's pid and health; exit 1 unless all are healthy")
    sub.add_parser("kubeconfig", help="print the kubeconfig path (export KUBECONFIG=$(accel-cluster kubeconfig))")
    nodes = sub.add_parser("nodes", help="create simulated nodes for the AcceleratorPools in a YAML file")
    nodes.add_argument("pools", metavar="POOLS.yaml")
    nodes.add_argument("--count", type=int, default=None, help="nodes per pool (default: the pool's maxNodes)")
    scale = sub.add_parser(
        "autoscaler",
        help="simulate the autoscaler of autoscaled pools (KWOK nodes for pending pods) until Ctrl-C",
    )
    scale.add_argument("--delay", type=_seconds, default=2.0, help="seconds a pod waits before a node is added (2)")
    scale.add_argument("--idle", type=_seconds, default=10.0, help="seconds a node it added may idle (10)")
    scale.add_argument("--interval", type=_interval, default=0.5, help="seconds between passes (0.5)")


def _seconds(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 86400:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text}: seconds from 0 to 86400")
    return value


def _interval(text: str) -> float:
    value = _seconds(text)
    if value < 0.01:
        raise argparse.ArgumentTypeError(f"{text}: at least 0.01 seconds between passes")
    return value


def run(args: argparse.Namespace) -> int:
    cluster = default_cluster()
    try:
        if args.action == "up":
            t0 = time.monotonic()
            cluster.up(build=not args.no_build, timeout=args.timeout)
            print(f"cluster healthy in {time.monotonic() - t0:.1f}s; export KUBECONFIG={cluster.kubeconfig}")
            return 0
        if args.action == "down":
            stopped = cluster.down(wipe=not args.keep_data)
            print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
            return 0
        if args.action == "kubeconfig":
            print(cluster.kubeconfig)
            return 0
        if args.action == "status":
            states = cluster.status()
            for s in states:
                mark = "healthy" if s.healthy else ("running, unhealthy" if s.running else "stopped")
                print(f"{s.name:26} {mark:20} pid={s.pid or '-'}  {s.detail if not s.healthy else ''}".rstrip())
            return 0 if all(s.healthy for s in states) else 1
        if args.action == "nodes":
            return _nodes(cluster.kubeconfig, args.pools, args.count)
        if args.action == "autoscaler":
            return _autoscaler(cluster.kubeconfig, delay=args.delay, idle=args.idle, interval=args.interval)
    except ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 2


def _nodes(kubeconfig: Path, path: str, count: int | None) -> int:
    try:
        docs = load_documents(Path(path).read_text(encoding="utf-8"), source=path)
        pools = [r for r in (parse_resource(d, source=path) for d in docs) if isinstance(r, AcceleratorPool)]
    except (OSError, UnicodeDecodeError) as exc:
        print(f"error: {path}: cannot read ({exc})", file=sys.stderr)
        return 2
    except InvalidResource as exc:
        for line in exc.problems:
            print(f"error: {path}: {line}", file=sys.stderr)
        return 2
    core = kubeapi.core(kubeconfig)
    for pool in pools:
        name = pool.metadata.name or "pool"
        made = nodes.ensure_nodes(core, nodes.node_manifests(name, pool.spec, count))
        print(f"{name}: {', '.join(made)}")
    return 0


def _autoscaler(kubeconfig: Path, *, delay: float, idle: float, interval: float) -> int:
    if not kubeconfig.is_file():
        print(f"error: no kubeconfig at {kubeconfig}: start the cluster first (accel-cluster up)", file=sys.stderr)
        return 1
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    scaler = autoscaler.SimulatedAutoscaler(
        kubeapi.api_client(kubeconfig), scale_up_delay=delay, idle_seconds=idle, interval=interval
    )
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how it ends
        scaler.run(threading.Event())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="accel-cluster", description=HELP)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
