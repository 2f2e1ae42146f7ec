"""``bash hack/dev.sh deploy``: the chart installed into the local control plane, its operator
running as a pod from the image built here on the real node (``realnode``), beside the KWOK nodes
where accelerator jobs land. ``undeploy`` uninstalls it and stops the node.

Two operator replicas run on the real node with addresses of their own on its pod network; they
reach the API server through the ``kubernetes`` Service (kube-proxy, ``Cluster.pod_network``), and
the holder of the Lease decides. Their image is imported into containerd (pull policy Never). The
chart owns the webhook configurations and the Service: the API server calls the webhook at the
pods' addresses (``--enable-aggregator-routing``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from accel_api import vocabulary as v
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


def values(operator_image: str, agent_image: str, built: str = "") -> dict[str, object]:
    """The chart's values for the local real node. ``built``: the operator archive's key (a new
    build under the same tag, e.g. a dirty tree's, rolls the pod)."""
    op_repo, op_tag = operator_image.rsplit(":", 1)
    agent_repo, agent_tag = agent_image.rsplit(":", 1)
    return {
        "operator": {
            "image": {"repository": op_repo, "tag": op_tag, "pullPolicy": "Never"},
            "replicas": 2,
            "nodeSelector": {"kubernetes.io/hostname": NODE_NAME},
            "podAnnotations": {"accel.dev/image-build": built} if built else {},
        },
        # One agent, on the real node (labelled as a GPU node by `up`), with its fake NVML backend.
        "agent": {
            "image": {"repository": agent_repo, "tag": agent_tag, "pullPolicy": "Never"},
            "backend": "fake",
            "nodeSelector": {"kubernetes.io/hostname": NODE_NAME},
        },
    }


def up(cluster: Cluster) -> None:
    if not cluster.pod_network:
        raise SystemExit("the real node needs the API server on the pod network: Cluster(pod_network=True)")
    cluster.up()
    node = node_of(cluster)
    node.up()
    # The agent's DaemonSet selects GPU nodes: the real node is one for it (its fake backend).
    _run(
        str(cluster.bin / "kubectl"),
        "label",
        "node",
        NODE_NAME,
        "--overwrite",
        f"{v.LABEL_GPU_PRESENT}=true",
        cluster=cluster,
    )
    archive = newest("accel-operator")
    operator_image = node.import_image(archive, "accel-operator")
    agent_image = node.import_image(newest("accel-agent"), "accel-agent")
    key = archive.with_name(archive.name + ".key")
    built = key.read_text().strip() if key.is_file() else ""
    path = cluster.state / "deploy-values.json"
    path.write_text(json.dumps(values(operator_image, agent_image, built)))
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
    # A running KWOK-only cluster is restarted with its API server on the pod network.
    cluster = replace(default_cluster(), pod_network=True)
    up(cluster) if args.action == "up" else down(cluster)
    return 0


if __name__ == "__main__":
    sys.exit(main())
