"""``accelctl cluster up|down|status|nodes``: the local control plane for tests and the demo."""

import argparse
import sys
import time

NAME = "cluster"
HELP = "Start, stop or inspect the local control plane (real kube-apiserver, etcd, scheduler, KWOK nodes)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = sub.add_parser("up", help="build if needed, start, write the kubeconfig (idempotent)")
    up.add_argument("--no-build", action="store_true", help="use the binaries already built")
    up.add_argument("--timeout", type=float, default=240.0, help="seconds to wait for health (default 240)")
    down = sub.add_parser("down", help="stop every component and drop etcd's data")
    down.add_argument("--keep-data", action="store_true", help="keep etcd's data folder")
    sub.add_parser("status", help="each component's pid and health; exit 1 unless all are healthy")
    sub.add_parser("kubeconfig", help="print the kubeconfig path (export KUBECONFIG=$(accelctl cluster kubeconfig))")
    nodes = sub.add_parser("nodes", help="create simulated nodes for the AcceleratorPools in a YAML file")
    nodes.add_argument("pools", metavar="POOLS.yaml")
    nodes.add_argument("--count", type=int, default=None, help="nodes per pool (default: the pool's maxNodes)")


def run(args: argparse.Namespace) -> int:
    from accel_localcluster import ClusterError, default_cluster

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


def _nodes(kubeconfig: object, path: str, count: int | None) -> int:
    from kubernetes import client, config

    from accel_api.pool import AcceleratorPool
    from accel_localcluster import nodes
    from accel_operator.cli import io

    pools = [r for r in io.read_resources(path) if isinstance(r, AcceleratorPool)]
    api = config.new_client_from_config(config_file=str(kubeconfig))
    core = client.CoreV1Api(api)
    for pool in pools:
        name = pool.metadata.name or "pool"
        made = nodes.ensure_nodes(core, nodes.node_manifests(name, pool.spec, count))
        print(f"{name}: {', '.join(made)}")
    return 0
