"""accel_localcluster: a real Kubernetes control plane on this machine, for tests and the demo.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler built from Go modules (see
hack/localcluster/), with accelerator nodes simulated by KWOK. ``accel-cluster up|down|status``
drives it; ``nodes`` turns AcceleratorPools into realistic Node objects; ``preempt`` does to a
node what each cloud does when it takes spot capacity back; ``autoscaler`` adds KWOK nodes to
autoscaled pools for their pending pods and removes them when idle (``accel-cluster autoscaler``).

This package is development tooling: the operator never imports it.
"""

from accel_localcluster.control_plane import Cluster, ClusterError, default_cluster

__all__ = ["Cluster", "ClusterError", "default_cluster"]
