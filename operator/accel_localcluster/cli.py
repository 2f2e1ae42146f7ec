"""``accel-cluster up|down|status|kubeconfig|nodes``: the local control plane for tests and the demo.

Dev tooling, with its own command: the product's ``accelctl`` never imports it.
"""

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from accel_api import InvalidResource, load_documents, parse_resource
from accel_api.pool import AcceleratorPool
from accel_localcluster import ClusterError, default_cluster, kubeapi, nodes

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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="accel-cluster", description=HELP)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
