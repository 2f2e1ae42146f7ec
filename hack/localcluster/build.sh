#!/usr/bin/env bash
# Builds the local control plane's binaries from Go modules with the machine's Go toolchain:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and kwok.
# Output goes to $ACCEL_CLUSTER_BIN (default .cache/localcluster/bin, ignored by git).
# Go's module and build caches make a second run take seconds; a binary that is newer than
# its go.mod/go.sum is not rebuilt at all.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${ACCEL_CLUSTER_BIN:-$root/.cache/localcluster/bin}
mkdir -p "$bin"
# Two cores: one package at a time per binary keeps peak memory sane; trimpath for stable caching.
export GOFLAGS="${GOFLAGS:-} -trimpath -buildvcs=false"
export CGO_ENABLED=0
jobs=${ACCEL_BUILD_JOBS:-2}

build() { # module-dir output-name package
  local dir=$1 out=$2 pkg=$3
  if [[ -x "$bin/$out" && "$bin/$out" -nt "$here/$dir/go.sum" && "$bin/$out" -nt "$here/$dir/go.mod" ]]; then
    return 0
  fi
  local t0=$SECONDS
  echo "building $out ..." >&2
  (cd "$here/$dir" && go build -p "$jobs" -ldflags="-s -w" -o "$bin/$out.tmp" "$pkg")
  mv "$bin/$out.tmp" "$bin/$out"
  echo "built $out in $((SECONDS - t0))s" >&2
}

build etcd etcd go.etcd.io/etcd/server/v3
build kwok kwok sigs.k8s.io/kwok/cmd/kwok
build k8s kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
build k8s kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
build k8s kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
build k8s kubectl k8s.io/kubernetes/cmd/kubectl
echo "$bin"
