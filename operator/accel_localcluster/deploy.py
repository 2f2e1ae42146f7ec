"""``bash hack/dev.sh deploy``: the chart installed into the local control plane, its operator
running as a pod from the image built here on the real node (``realnode``), beside the KWOK nodes
where accelerator jobs land. ``undeploy`` uninstalls it and stops the node.

The operator runs with the host's network on the real node (one replica: the local cluster has no
kube-proxy, so a pod reaches the API server on 127.0.0.1, and two replicas would share the host's
ports), its image imported into containerd (pull policy Never), and the chart's own webhook
configurations and Service: the API server calls the webhook at the pod's address
(``--enable-aggregator-routing``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from accel_localcluster import Cluster, default_cluster
from accel_localcluster.control_plane import REPO
from accel_localcluster.realnode import NODE_NAME, RealNode

RELEASE, NAMESPACE = "accel-operator", "accel-system"
CHART = REPO / "charts" / "accel-operator"
IMAGES = REPO / ".cache" / "images"


def node_of(cluster: Cluster) -> RealNode:
    return RealNode(cluster.state, cluster.bin, cluster.kubeconfig, cluster.ports.apiserver + 25)


def newest(name: str) -> Path:
    found = sorted(IMAGES.glob(f"{name}-*.oci.tar"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise SystemExit(f"no {name} image in {IMAGES}: run `bash hack/dev.sh images` first")
    return found[-1]


def _env(cluster: Cluster) -> dict[str, str]:
    """This process's environment (HOME keeps helm's and kubectl's caches where they belong) with
    the cluster's kubeconfig and binaries."""
    return {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "PATH": f"{cluster.bin}:{os.environ.get('PATH', '')}"}


def _run(*args: str, cluster: Cluster, timeout: float = 600) -> None:
    done = subprocess.run(list(args), env=_env(cluster), timeout=timeout, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args[:3])} ... failed ({done.returncode})")


def values(cluster: Cluster, operator_image: str, agent_image: str, built: str = "") -> dict[str, object]:
    """The chart's values for the local real node. ``built``: the operator archive's key (a new
    build under the same tag, e.g. a dirty tree's, rolls the pod)."""
    op_repo, op_tag = operator_image.rsplit(":", 1)
    agent_repo, agent_tag = agent_image.rsplit(":", 1)
    return {
        "operator": {
            "image": {"repository": op_repo, "tag": op_tag, "pullPolicy": "Never"},
            "replicas": 1,
            "hostNetwork": True,
            "nodeSelector": {"kubernetes.io/hostname": NODE_NAME},
            "podAnnotations": {"accel.dev/image-build": built} if built else {},
            "extraEnv": [
                {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
                {"name": "KUBERNETES_SERVICE_PORT", "value": str(cluster.ports.apiserver)},
            ],
        },
        "agent": {"image": {"repository": agent_repo, "tag": agent_tag, "pullPolicy": "Never"}},
    }


def up(cluster: Cluster) -> None:
    cluster.up()
    node = node_of(cluster)
    node.up()
    archive = newest("accel-operator")
    operator_image = node.import_image(archive, "accel-operator")
    agent_image = node.import_image(newest("accel-agent"), "accel-agent")
    key = archive.with_name(archive.name + ".key")
    built = key.read_text().strip() if key.is_file() else ""
    path = cluster.state / "deploy-values.json"
    path.write_text(json.dumps(values(cluster, operator_image, agent_image, built)))
    helm = str(cluster.bin / "helm")
    _run(
        helm, "upgrade", "--install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace",
        "--take-ownership", "-f", str(path), "--wait", "--timeout", "5m", cluster=cluster,
    )  # fmt: skip
    print(f"deployed: {RELEASE} in {NAMESPACE} ({operator_image} on node {NODE_NAME}); KUBECONFIG={cluster.kubeconfig}")


def down(cluster: Cluster) -> None:
    if cluster.kubeconfig.is_file():
        helm = str(cluster.bin / "helm")
        subprocess.run(
            [helm, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--ignore-not-found"],
            env=_env(cluster),
            timeout=300,
            check=False,
        )
    node_of(cluster).down()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m accel_localcluster.deploy")
    parser.add_argument("action", choices=["up", "down"])
    args = parser.parse_args(argv)
    cluster = default_cluster()
    up(cluster) if args.action == "up" else down(cluster)
    return 0


if __name__ == "__main__":
    sys.exit(main())
