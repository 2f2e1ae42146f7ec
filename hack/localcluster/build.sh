#!/usr/bin/env bash
# Builds the local control plane's binaries from Go modules with the machine's Go toolchain:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok and helm; and, for the
# real node (accel_localcluster.realnode), kubelet, kube-proxy and the pod sandbox's pause.
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

build() { # module-dir output-name package [extra ldflags]
  local dir=$1 out=$2 pkg=$3 extra=${4:-}
  # Rebuilt when its go.mod/go.sum or this script (the flags) changed; only the link step reruns
  # while Go's build cache is warm.
  if [[ -x "$bin/$out" && "$bin/$out" -nt "$here/$dir/go.sum" && "$bin/$out" -nt "$here/$dir/go.mod" \
    && "$bin/$out" -nt "$here/build.sh" ]]; then
    return 0
  fi
  local t0=$SECONDS
  echo "building $out ..." >&2
  (cd "$here/$dir" && go build -p "$jobs" -ldflags="-s -w $extra" -o "$bin/$out.tmp" "$pkg")
  mv "$bin/$out.tmp" "$bin/$out"
  echo "built $out in $((SECONDS - t0))s" >&2
}

build etcd etcd go.etcd.io/etcd/server/v3
build kwok kwok sigs.k8s.io/kwok/cmd/kwok
build helm helm helm.sh/helm/v3/cmd/helm
build pause pause .
# The version stamp the upstream build (hack/lib/version.sh) sets: without it every component
# reports v0.0.0-master+$Format:%H$, `kubectl version` cannot parse the server's version and
# tools that check it (Kueue's manager, for one) refuse to start. The pinned release is read
# from go.mod; the build date is fixed so that the link stays cacheable.
k8s_version=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3; exit}
  $1 == "k8s.io/kubernetes" && $2 ~ /^v[0-9]/ {print $2; exit}' "$here/k8s/go.mod")
[[ $k8s_version =~ ^v([0-9]+)\.([0-9]+)\. ]] || { echo "cannot read the k8s.io/kubernetes version from go.mod" >&2; exit 1; }
k8s_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=${BASH_REMATCH[1]}"
  k8s_ldflags+=" -X $pkg.gitMinor=${BASH_REMATCH[2]} -X $pkg.gitTreeState=clean"
  k8s_ldflags+=" -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
build k8s kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$k8s_ldflags"
build k8s kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$k8s_ldflags"
build k8s kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "$k8s_ldflags"
build k8s kubectl k8s.io/kubernetes/cmd/kubectl "$k8s_ldflags"
build k8s kubelet k8s.io/kubernetes/cmd/kubelet "$k8s_ldflags"
build k8s kube-proxy k8s.io/kubernetes/cmd/kube-proxy "$k8s_ldflags"
echo "$bin"
