#!/usr/bin/env bash
# The operator and node agent images, built on this machine with no container registry:
#
#   bash hack/images.sh build   both images, as OCI archives in .cache/images/
#   bash hack/images.sh smoke   run each built image with runc: non-root, read-only root filesystem
#   bash hack/images.sh all     build, then smoke (what `bash hack/dev.sh images` runs)
#
# This script is the single source of both images, in place of a Containerfile: a Containerfile
# starts FROM a base image, and a base image comes from a registry. Here the base is a Debian
# root filesystem made from Debian packages (mmdebstrap), the Python dependencies are the wheels
# pinned by constraints.txt, the project's own distributions (accel-api, accel-agent,
# accel-operator; never accel-localcluster, which is dev tooling) are wheels built here, and umoci
# writes the image layout. Nothing in the images is compiled: wheels are built or downloaded on
# the host and installed into a venv (/opt/venv) by the image's own python, run in a chroot; the
# runtime images hold no gcc, cc or pip.
#
# Each image has two layers: the base (Debian, python3, ca-certificates, the user) and the venv.
# It runs as UID/GID 65532 ("accel") and needs no writes under / : set the container's root
# filesystem read-only and mount an emptyDir at /tmp (HOME and TMPDIR point there) for the
# operator's self-signed webhook key when no certificate Secret is mounted, and for the
# Kubernetes client's temporary certificate files. PYTHONDONTWRITEBYTECODE=1: the .pyc files are
# compiled at build time.
#
# Tag: `git describe --tags --always --dirty`, without a release tag's leading v. Outputs: .cache/images/accel-operator-<tag>.oci.tar
# and accel-agent-<tag>.oci.tar (OCI image layouts in tar archives, the image's ref name is the tag).
# Cached: the base root filesystem (keyed on suite and package list), the dependency wheels (keyed
# on constraints.txt and the project manifests) and each archive (keyed on all inputs), so a second
# run with nothing changed takes seconds.
#
# Needs: root (mmdebstrap, chroot, umoci unpack keep file owners), mmdebstrap, umoci, and runc for
# the smoke test (Debian: apt-get install mmdebstrap umoci runc); python3 with pip for the wheels.
# ACCEL_IMAGE_EXTRAS=cloud adds the operator's cloud extra (boto3, the Google TPU client), which
# is left out by default: the operator imports those SDKs only where a cloud is configured.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

suite=bookworm
mirror=http://deb.debian.org/debian
security=http://deb.debian.org/debian-security
# usr-is-merged stands in for usrmerge (init-system-helpers needs one of them), so that usrmerge and
# the perl it brings (30 MB, needed only while mmdebstrap sets up /usr) can be purged afterwards.
# libstdc++6: grpcio's extension links it (manylinux wheels expect the system's).
base_packages=(python3 ca-certificates usr-is-merged libstdc++6)
uid=65532
venv=/opt/venv
extras=${ACCEL_IMAGE_EXTRAS:-}
cache=${ACCEL_IMAGE_CACHE:-$root/.cache/images}
source_url=${ACCEL_IMAGE_SOURCE:-https://github.com/accel-dev/accel-operator}

log() { printf '== %s\n' "$*" >&2; }
# ticking LABEL CMD...: run CMD; on a terminal, a line redrawn every second with the time it has
# taken (the long steps, mmdebstrap and the wheels' download, say nothing for minutes); elsewhere
# CMD alone, its log line said before it.
ticking() {
  local label=$1 start=$SECONDS ticker rc=0
  shift
  if [[ ! -t 2 ]]; then "$@"; return; fi
  ( while sleep 1; do printf '\r   %s: %ds ' "$label" $((SECONDS - start)) >&2; done ) &
  ticker=$!
  "$@" || rc=$?
  kill "$ticker" 2>/dev/null || true
  wait "$ticker" 2>/dev/null || true
  printf '\r   %s: %s in %ds\n' "$label" "$([[ $rc == 0 ]] && echo done || echo failed)" $((SECONDS - start)) >&2
  return "$rc"
}
scratch=()
cleanup() { local d; for d in "${scratch[@]}"; do rm -rf "$d"; done; }
trap cleanup EXIT
# scratch_dir: a folder under the cache (hard links and renames stay on one file system), removed at exit
scratch_dir() { local d; d=$(mktemp -d "$cache/work.XXXXXX"); scratch+=("$d"); work=$d; }
die() { printf 'images: %s\n' "$*" >&2; exit 1; }
sha() { sha256sum | cut -c1-16; }

hook_purge='chroot "$1" dpkg --purge usrmerge libfile-find-rule-perl libnumber-compare-perl libtext-glob-perl perl perl-modules-5.36 libperl5.36 libgdbm-compat4'
# dpkg's path-excludes keep documentation (except copyright files), man pages and translations out.
hook_user="echo 'accel:x:$uid:$uid:accel:/tmp:/usr/sbin/nologin' >>\"\$1/etc/passwd\"; echo 'accel:x:$uid:' >>\"\$1/etc/group\""
hook_clean='rm -rf "$1"/var/log/* "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old "$1"/etc/machine-id'
dpkg_opts=(path-exclude=/usr/share/man/* path-exclude=/usr/share/doc/* path-include=/usr/share/doc/*/copyright
  path-exclude=/usr/share/locale/* path-exclude=/usr/share/info/* path-exclude=/usr/share/lintian/*)

require_tools() {
  [[ $(id -u) == 0 ]] || die "run as root: mmdebstrap, chroot and umoci unpack need it"
  local t
  for t in "$@"; do
    command -v "$t" >/dev/null || die "$t is missing (Debian: apt-get install mmdebstrap umoci runc)"
  done
}

# A release tag v0.1.0 gives the images 0.1.0: the chart's appVersion, its default image tag.
image_tag() { git describe --tags --always --dirty | sed 's/^v\([0-9]\)/\1/'; }

# --- 1. the base: a Debian root filesystem as a one-layer OCI layout ------------------------------
base_key() {
  printf '%s\n' "$suite" "$mirror" "$security" "${base_packages[@]}" "$uid" "$hook_purge" "$hook_user" \
    "$hook_clean" "${dpkg_opts[@]}" "$(dpkg --print-architecture)" | sha
}

build_base() {
  local key=$1 tar=$cache/base-$1.tar layout=$cache/base-$1.oci
  [[ -d $layout && -f $cache/base-$key.python ]] && return 0
  if [[ ! -f $tar ]]; then
    log "base: mmdebstrap $suite with ${base_packages[*]} (cached as $(basename "$tar"))"
    local opts=() o
    for o in "${dpkg_opts[@]}"; do opts+=(--dpkgopt="$o"); done
    ticking "base: mmdebstrap" nice -n 10 mmdebstrap --quiet --variant=essential --format=tar --include="$(IFS=,; echo "${base_packages[*]}")" \
      "${opts[@]}" --customize-hook="$hook_purge" --customize-hook="$hook_user" --customize-hook="$hook_clean" \
      "$suite" "$tar.part" "deb $mirror $suite main" "deb $mirror $suite-updates main" \
      "deb $security $suite-security main"
    mv "$tar.part" "$tar"
  fi
  log "base: OCI layout"
  local work
  scratch_dir
  rm -rf "$layout.part"
  umoci init --layout "$layout.part"
  umoci new --image "$layout.part:base"
  umoci unpack --image "$layout.part:base" "$work/bundle" >/dev/null
  tar -xf "$tar" -C "$work/bundle/rootfs"
  chroot "$work/bundle/rootfs" /usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' \
    >"$cache/base-$key.python"
  nice -n 10 umoci repack --image "$layout.part:base" --history.created_by "mmdebstrap $suite ${base_packages[*]}" \
    "$work/bundle" >/dev/null
  rm -rf "$work"
  mv "$layout.part" "$layout"
}

# --- 2. wheels: the project's own, built from a copy of the work tree, and its dependencies --------
# A copy, because setuptools writes build/ and *.egg-info next to the sources it builds.
copy_sources() {
  local dst=$1
  mkdir -p "$dst"
  git ls-files -z --cached --others --exclude-standard -- pyproject.toml README.md operator/accel_api \
    operator/accel_operator agent/pyproject.toml agent/README.md agent/accel_agent |
    while IFS= read -r -d '' f; do [[ -e $f ]] && printf '%s\0' "$f"; done |
    tar --null -T - -cf - | tar -xf - -C "$dst"
}

tree_key() { (cd "$1" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha); }

build_venv() {
  local bv=$cache/build-venv
  if [[ ! -x $bv/bin/python ]]; then
    log "wheels: a build virtualenv (setuptools, wheel) in $(basename "$bv")"
    python3 -m venv "$bv.part"
    "$bv.part/bin/python" -m pip install -q --disable-pip-version-check 'setuptools>=77' wheel
    mv "$bv.part" "$bv"
  fi
  echo "$bv/bin/python"
}

# --- 3. an image: the base, plus a layer with the venv, plus the configuration ---------------------
# build_image NAME TITLE DIST COMMAND...
# The command is the image's Cmd, with no Entrypoint: the manifests' `args: [python, -m, ...]` then
# replace it whole (python is the venv's, first on PATH), and `accelctl ...` can be run the same way.
build_image() {
  local name=$1 title=$2 dist=$3
  shift 3
  local out=$cache/$name-$tag.oci.tar key
  key=$(printf '%s\n' "$inputs_key" "$name" "$dist" "$@" | sha)
  if [[ -f $out && $(cat "$out.key" 2>/dev/null) == "$key" ]]; then
    log "$name: $(basename "$out") is up to date"
    return 0
  fi
  log "$name: installing $dist into $venv"
  local work layout bundle rootfs
  scratch_dir
  layout=$work/layout bundle=$work/bundle rootfs=$work/bundle/rootfs
  cp -a "$base_layout" "$layout"
  umoci unpack --image "$layout:base" "$bundle" >/dev/null
  mkdir -p "$rootfs/tmp/wheels"
  cp "$deps_dir"/*.whl "$local_dir"/*.whl "$rootfs/tmp/wheels/"
  chroot "$rootfs" /usr/bin/python3 -m venv --without-pip "$venv"
  # pip runs from its wheel with the image's own python, so scripts get the venv's interpreter in
  # their #! line and pip picks wheels for that python; pip itself is not installed.
  local pip_whl
  pip_whl=$(cd "$rootfs/tmp/wheels" && ls pip-*.whl)
  chroot "$rootfs" /usr/bin/env -i HOME=/tmp PATH=/usr/bin:/bin "$venv/bin/python" "/tmp/wheels/$pip_whl/pip" \
    install -q --no-index --find-links /tmp/wheels --no-cache-dir --disable-pip-version-check "$dist"
  rm -rf "$rootfs/tmp/wheels" "$rootfs/tmp/"* "$rootfs/root/.cache"
  local found
  found=$(find "$rootfs" -path '*/bin/*' \( -name gcc -o -name 'gcc-[0-9]*' -o -name cc -o -name 'c++' -o -name 'g++*' \
    -o -name '*-linux-gnu-gcc*' -o -name clang -o -name ld -o -name as -o -name pip -o -name 'pip3*' \) -print | head -5)
  [[ -z $found ]] || die "$name: the runtime image must hold no compiler or pip: ${found//$rootfs/}"
  # Every extension module finds its shared libraries in the image (else: a base package is missing).
  found=$(chroot "$rootfs" /bin/sh -c "find $venv -name '*.so*' -type f -exec ldd {} + 2>&1" | grep 'not found' | sort -u || true)
  [[ -z $found ]] || die "$name: shared libraries missing from the base: $found"
  nice -n 10 umoci repack --image "$layout:$tag" --history.created_by "pip install $dist into $venv" \
    "$bundle" >/dev/null
  local created revision
  created=$(git log -1 --format=%cI)
  revision=$(git rev-parse HEAD)
  local cfg=(--config.user "$uid:$uid" --config.workingdir /tmp --created "$created" --author "accel-operator"
    --config.env "PATH=$venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    --config.env HOME=/tmp --config.env TMPDIR=/tmp --config.env PYTHONDONTWRITEBYTECODE=1
    --config.env PYTHONUNBUFFERED=1 --config.env LANG=C.UTF-8 --clear=config.entrypoint --clear=config.cmd
    --history.created_by "umoci config: user $uid, command $*")
  local a
  for a in "$@"; do cfg+=(--config.cmd "$a"); done
  local labels=(org.opencontainers.image.source="$source_url" org.opencontainers.image.revision="$revision"
    org.opencontainers.image.version="$tag" org.opencontainers.image.title="$title"
    org.opencontainers.image.created="$created" org.opencontainers.image.licenses=Apache-2.0)
  for a in "${labels[@]}"; do cfg+=(--config.label "$a" --manifest.annotation "$a"); done
  umoci config --image "$layout:$tag" "${cfg[@]}"
  umoci rm --image "$layout:base"
  umoci gc --layout "$layout"
  tar -C "$layout" --sort=name --owner=0 --group=0 --numeric-owner --mtime="$created" -cf "$out.part" \
    oci-layout index.json blobs
  mv "$out.part" "$out"
  echo "$key" >"$out.key"
  rm -rf "$work"
  log "$name: $(basename "$out") ($(du -m "$out" | cut -f1) MiB)"
}

build() {
  require_tools mmdebstrap umoci chroot python3
  mkdir -p "$cache"
  tag=$(image_tag)
  local bkey
  bkey=$(base_key)
  build_base "$bkey"
  base_layout=$cache/base-$bkey.oci
  local pyver arch
  pyver=$(cat "$cache/base-$bkey.python")
  arch=$(uname -m)

  local work
  scratch_dir
  copy_sources "$work/src"
  local src_key
  src_key=$(tree_key "$work/src")
  local bpy
  bpy=$(build_venv)
  local_dir=$cache/local-$src_key
  if [[ ! -d $local_dir ]]; then
    log "wheels: accel-api, accel-agent, accel-operator (pip wheel --no-deps)"
    (cd "$work/src" && nice -n 10 "$bpy" -m pip wheel -q --no-deps --no-build-isolation --disable-pip-version-check \
      -w "$local_dir.part" ./operator/accel_api ./agent .)
    mv "$local_dir.part" "$local_dir"
  fi

  # The dependencies, as binary wheels for the base's python, pinned by constraints.txt. The
  # project's wheels are named as files, so no index is asked for a package of the same name.
  local dkey
  dkey=$(cat constraints.txt pyproject.toml agent/pyproject.toml operator/accel_api/pyproject.toml |
    { cat; printf '%s\n' "$pyver" "$arch" "$extras"; } | sha)
  deps_dir=$cache/wheels-$dkey
  if [[ ! -d $deps_dir ]]; then
    log "wheels: dependencies for python $pyver ($arch) from constraints.txt"
    local abi=cp${pyver/./} reqs=() w
    for w in "$local_dir"/*.whl; do
      case $(basename "$w") in
        accel_operator-*) reqs+=("accel-operator${extras:+[$extras]} @ file://$w") ;;
        *) reqs+=("$w") ;;
      esac
    done
    rm -rf "$deps_dir.part"
    ticking "wheels: download" nice -n 10 "$bpy" -m pip download -q --disable-pip-version-check -c constraints.txt --only-binary=:all: \
      --implementation cp --python-version "$pyver" --abi "$abi" --abi abi3 --abi none \
      --platform "manylinux_2_36_$arch" --platform "manylinux_2_34_$arch" --platform "manylinux_2_28_$arch" \
      --platform "manylinux_2_17_$arch" --platform "manylinux2014_$arch" --platform "manylinux1_$arch" --platform any \
      -d "$deps_dir.part" "${reqs[@]}"
    # pip, to install with (run from its wheel in the chroot; it stays out of the image)
    "$bpy" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$deps_dir.part" pip
    rm -f "$deps_dir.part"/accel_*.whl
    mv "$deps_dir.part" "$deps_dir"
  fi

  # Only the current base, project wheels and dependency wheels are kept.
  local old
  for old in "$cache"/base-* "$cache"/local-* "$cache"/wheels-*; do
    case $old in "$cache/base-$bkey".* | "$local_dir" | "$deps_dir") ;; *) rm -rf "$old" ;; esac
  done

  inputs_key=$(printf '%s\n' "$bkey" "$src_key" "$dkey" "$tag" "$(sha256sum "$0")" | sha)
  build_image accel-operator "accel-operator" "accel-operator${extras:+[$extras]}" python -m accel_operator
  build_image accel-agent "accel-agent" accel-agent python -m accel_agent
  echo "$tag" >"$cache/latest-tag"
}

# --- 4. smoke: run each image with runc, as its user, with a read-only root -----------------------
# run_in IMAGE_TAR [ARGS...]: unpack the image into a runtime bundle (umoci writes its config.json from
# the image configuration: user, environment, working directory, command), make the root
# read-only, mount a tmpfs at /tmp as a Pod's emptyDir would be, and run ARGS (else the command).
declare -A bundles=()
run_in() {
  local archive=$1
  shift
  local work
  if [[ -z ${bundles[$archive]:-} ]]; then
    scratch_dir
    mkdir "$work/layout" "$work/bundle"
    tar -xf "$archive" -C "$work/layout"
    # raw: the root filesystem without umoci's mtree manifest, which a run needs not (and costs time)
    umoci raw unpack --image "$work/layout:$tag" "$work/bundle/rootfs" >/dev/null 2>&1
    umoci raw runtime-config --image "$work/layout:$tag" --rootfs "$work/bundle/rootfs" "$work/image-config.json"
    bundles[$archive]=$work
  fi
  work=${bundles[$archive]}
  python3 - "$work/image-config.json" "$work/bundle/config.json" "$@" <<'PY'
import json, sys
src, path, args = sys.argv[1], sys.argv[2], sys.argv[3:]
cfg = json.load(open(src))
cfg["root"]["readonly"] = True
if args:
    cfg["process"]["args"] = args
cfg["process"]["terminal"] = False
cfg["mounts"].append({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
                      "options": ["nosuid", "nodev", "mode=1777", "size=64m"]})
json.dump(cfg, open(path, "w"))
PY
  local rc=0
  runc run --bundle "$work/bundle" "accel-smoke-$$-$RANDOM" </dev/null || rc=$?
  return "$rc"
}

smoke() {
  require_tools umoci runc python3
  tag=${tag:-$(cat "$cache/latest-tag" 2>/dev/null || image_tag)}
  local op=$cache/accel-operator-$tag.oci.tar ag=$cache/accel-agent-$tag.oci.tar
  [[ -f $op && -f $ag ]] || die "no images for $tag: run bash hack/images.sh build"
  local check='import os, sys
assert os.getuid() == 65532 and os.getgid() == 65532, (os.getuid(), os.getgid())
try:
    open("/opt/venv/written", "w")
except OSError as exc:
    print("root filesystem read-only:", exc.strerror)
else:
    sys.exit("the root filesystem is writable")
open("/tmp/ok", "w").write("ok")'
  log "smoke: accel-operator $tag"
  run_in "$op" /bin/sh -c "accelctl --help >/dev/null && echo 'accelctl --help: ok' &&
    python -c 'import accel_operator, kopf, kubernetes; print(\"import accel_operator, kopf: ok\")' &&
    python -c '$check'"
  # The image's own command: the operator starts and stops where it looks for a cluster (none here).
  local out
  out=$(run_in "$op" 2>&1) && die "the operator ran without a cluster: $out"
  grep -q 'No configuration found' <<<"$out" || die "the operator's command failed otherwise: $out"
  echo "the image's command (python -m accel_operator): starts, stops at 'no cluster configuration': ok"
  log "smoke: accel-agent $tag"
  run_in "$ag" /bin/sh -c "python -m accel_agent --help >/dev/null && echo 'python -m accel_agent --help: ok' &&
    python -c 'import accel_agent, kubernetes, pynvml, grpc; print(\"import kubernetes, pynvml, grpc: ok\")' &&
    python -c 'import importlib.util as u; assert u.find_spec(\"kopf\") is None; print(\"no kopf: ok\")' &&
    python -c '$check' &&
    python -m accel_agent --once --backend fake --node-name smoke --output /tmp/r.json &&
    python -c 'import json; r = json.load(open(\"/tmp/r.json\")); print(\"agent --once:\", r[\"kind\"], len(r[\"status\"][\"devices\"]), \"devices\")'"
  log "smoke: passed"
}

case ${1:-all} in
  build) build ;;
  smoke) smoke ;;
  all) build; smoke ;;
  *) echo "usage: bash hack/images.sh [build|smoke|all]" >&2; exit 2 ;;
esac
