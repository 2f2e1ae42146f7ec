#!/usr/bin/env bash
# The project's one entry point for people and CI:
#   bash hack/dev.sh demo    set up everything, start the local cluster, run the demo
#   bash hack/dev.sh test    set up everything, run lint, types, layering, drift, the docs build, unit and cluster tests
#   bash hack/dev.sh setup   only the set-up (virtualenv + local control plane binaries)
#   bash hack/dev.sh docs    build the documentation site (docs/, mkdocs.yml) into site/, --strict
#   bash hack/dev.sh images  build the operator and node agent images (OCI archives in .cache/images/,
#                            no registry: hack/images.sh) and run each with runc as a smoke test
#   bash hack/dev.sh deploy  the local cluster with one real node (containerd, runc, a kubelet), the
#                            images built and imported, the Helm chart installed (docs/deploy.md)
#   bash hack/dev.sh undeploy  uninstall the chart and stop the real node
# Set-up installs Python packages into .venv from the package index (pinned by constraints.txt)
# and builds the control plane with the machine's Go from the Go module proxy. Both are cached:
# a second run takes seconds.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv=$root/.venv
py=$venv/bin/python

log() { printf '\n== %s\n' "$*" >&2; }

setup_python() {
  local stamp=$venv/.installed
  local manifests=(pyproject.toml agent/pyproject.toml operator/accel_api/pyproject.toml
    operator/accel_localcluster/pyproject.toml constraints.txt)
  local fresh=1 m
  for m in "${manifests[@]}"; do [[ -f $stamp && $stamp -nt $m ]] || fresh=0; done
  if [[ -x $py && $fresh == 1 ]]; then
    return 0
  fi
  log "python: creating .venv and installing the workspace (api, operator, agent, dev tooling) with its dev extras"
  command -v python3 >/dev/null || { echo "python3 (3.11+) is required" >&2; exit 1; }
  [[ -x $py ]] || python3 -m venv "$venv"
  "$py" -m pip install -q --upgrade pip
  "$py" -m pip install -q -c constraints.txt -e operator/accel_api -e agent -e operator/accel_localcluster -e ".[dev]"
  touch "$stamp"
}

setup_cluster() {
  command -v go >/dev/null || { echo "go (1.26+) is required to build the local control plane" >&2; exit 1; }
  log "local control plane: building (cached after the first time)"
  local t0=$SECONDS
  bash hack/localcluster/build.sh >/dev/null
  echo "control plane binaries ready in $((SECONDS - t0))s" >&2
}

# The HTML cost report's test opens it in Debian's chromium (headless). Installed only when missing,
# only for the test command, and only where apt-get can run (root, or passwordless sudo); else the
# test skips and says why.
setup_browser() {
  command -v chromium >/dev/null && return 0
  local sudo=""
  if [[ $(id -u) != 0 ]]; then
    command -v sudo >/dev/null && sudo -n true 2>/dev/null && sudo="sudo -n" || {
      echo "chromium is missing and apt-get cannot run here: the HTML report test will skip" >&2
      return 0
    }
  fi
  command -v apt-get >/dev/null || { echo "no apt-get: the HTML report test will skip" >&2; return 0; }
  log "chromium (headless browser for the HTML cost report test)"
  $sudo apt-get update -q >/dev/null || true
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends chromium >/dev/null ||
    echo "apt-get could not install chromium: the HTML report test will skip" >&2
}

# mkdocs --strict: a broken link or anchor between the pages fails the build (mkdocs.yml's
# validation settings make every kind a warning, and strict makes warnings fatal).
build_docs() {
  NO_MKDOCS_2_WARNING=1 "$venv/bin/mkdocs" build --strict --config-file "$root/mkdocs.yml"
}

run_checks() {
  log "ruff"
  "$venv/bin/ruff" check operator agent tests bench
  "$venv/bin/ruff" format --check operator agent tests bench
  log "mypy --strict"
  "$venv/bin/mypy"
  log "import layers (import-linter)"
  "$venv/bin/lint-imports"
  log "CRDs in sync with the models"
  "$venv/bin/accelctl" crds --check
  log "the node agent installs and runs alone (no kopf)"
  bash hack/check-agent-alone.sh
  log "docs site (mkdocs build --strict)"
  build_docs
}


run_tests() {
  log "pytest: unit and cluster tests"
  "$py" -m pytest "$@"
}

setup_node() {
  # The real node's runtime, from Debian (accel_localcluster/realnode.py says what each is for).
  local missing=() p
  for p in containerd runc umoci mmdebstrap containernetworking-plugins; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    log "real node: apt-get install ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# The deploy test (tests/cluster/test_deploy.py: the chart on a real kubelet node, from the images
# built here) needs root for containerd and the image build; elsewhere it is skipped, and says so.
setup_deploy_test() {
  if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
    echo "not root (or no apt-get): the deploy test (real node, images) will skip" >&2
    return 0
  fi
  setup_node
  log "images (hack/images.sh build; cached after the first time)"
  bash hack/images.sh build
  export ACCEL_DEPLOY_TEST=1
}

cmd=${1:-test}
shift || true
case "$cmd" in
  setup) setup_python; setup_cluster ;;
  test) setup_python; setup_cluster; setup_browser; setup_deploy_test; run_checks; run_tests "$@" ;;
  demo) setup_python; setup_cluster; exec "$py" -m accel_localcluster.demo "$@" ;;
  docs) setup_python; build_docs; echo "docs site built: $root/site/index.html" ;;
  images) bash hack/images.sh all ;;
  deploy) setup_python; setup_cluster; setup_node; bash hack/images.sh build; exec "$py" -m accel_localcluster.deploy up ;;
  undeploy) setup_python; exec "$py" -m accel_localcluster.deploy down ;;
  *) echo "usage: bash hack/dev.sh [setup|test|demo|docs|images|deploy|undeploy]" >&2; exit 2 ;;
esac
