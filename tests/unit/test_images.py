"""The container images that ``bash hack/dev.sh images`` builds (``hack/images.sh``) are what the
deployment expects: a non-root numeric user, the OCI labels, the entrypoint, the environment that
lets them run with a read-only root filesystem, and no compiler or pip in any layer.

The images are read from their OCI archives with tarfile and json, no container tool. The checks
on the real archives are skipped when none has been built (they are in ``.cache/images/``, or in
``$ACCEL_IMAGE_CACHE``); the checker itself is tested on small archives made here, so that a root
user, a missing label or a compiler is known to fail it.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("ACCEL_IMAGE_CACHE") or ROOT / ".cache" / "images")
ARCHIVE = re.compile(r"^(?P<name>accel-operator|accel-agent)-(?P<tag>.+)\.oci\.tar$")
LABELS = (
    "org.opencontainers.image.source",
    "org.opencontainers.image.revision",
    "org.opencontainers.image.version",
    "org.opencontainers.image.title",
)
# The command is the image's Cmd, with no Entrypoint, so that the manifests' args replace it whole.
COMMAND = {
    "accel-operator": ["python", "-m", "accel_operator"],
    "accel-agent": ["python", "-m", "accel_agent"],
}
# Files each image must hold (paths in the root filesystem; site/ is the venv's site-packages).
SITE = "opt/venv/lib/python3.N/site-packages/"
MUST_HOLD = {
    "accel-operator": ("opt/venv/bin/accelctl", SITE + "accel_operator/__main__.py", SITE + "kopf/__init__.py"),
    "accel-agent": (SITE + "accel_agent/__main__.py", SITE + "kubernetes/__init__.py", SITE + "pynvml.py"),
}
# Programs a runtime image must not carry: compilers, linkers, assemblers, pip.
FORBIDDEN = re.compile(
    r"(^|/)s?bin/(gcc(-\d+)?|cc|c\+\+|g\+\+(-\d+)?|[\w-]+-linux-gnu-gcc(-\d+)?|clang|ld|as|pip3?(\.\d+)?)$"
)


@dataclass(frozen=True, kw_only=True)
class Image:
    """What an OCI archive says: the image configuration and every path its layers add."""

    config: dict[str, Any]
    annotations: dict[str, str]
    ref_name: str
    paths: frozenset[str]


def _member(tar: tarfile.TarFile, name: str) -> bytes:
    f = tar.extractfile(name)
    assert f is not None, f"{name} is not a file in the archive"
    return f.read()


def read_image(archive: Path) -> Image:
    """Parse an OCI image layout in a tar archive with one image in its index."""
    with tarfile.open(archive) as tar:
        index = json.loads(_member(tar, "index.json"))
        (desc,) = index["manifests"]

        def blob(digest: str) -> bytes:
            algorithm, hexdigest = digest.split(":", 1)
            return _member(tar, f"blobs/{algorithm}/{hexdigest}")

        manifest = json.loads(blob(desc["digest"]))
        config = json.loads(blob(manifest["config"]["digest"]))
        paths: set[str] = set()
        for layer in manifest["layers"]:
            data = blob(layer["digest"])
            if layer["mediaType"].endswith("+gzip"):
                data = gzip.decompress(data)
            with tarfile.open(fileobj=io.BytesIO(data)) as layer_tar:
                paths.update(m.name.removeprefix("./") for m in layer_tar.getmembers() if not m.isdir())
    return Image(
        config=config,
        annotations=manifest.get("annotations") or {},
        ref_name=desc.get("annotations", {}).get("org.opencontainers.image.ref.name", ""),
        paths=frozenset(paths),
    )


def problems(image: Image, *, name: str, tag: str) -> list[str]:
    """Everything wrong with ``image`` as the image ``name`` at ``tag``; empty when it is right."""
    out: list[str] = []
    cfg = image.config.get("config") or {}
    user = str(cfg.get("User", ""))
    uid, _, gid = user.partition(":")
    if not uid.isdigit() or int(uid) == 0 or (gid and (not gid.isdigit() or int(gid) == 0)):
        out.append(f"user {user!r}: want a numeric, non-root uid:gid")
    labels = cfg.get("Labels") or {}
    out += [f"label {label} missing" for label in LABELS if not labels.get(label)]
    if labels.get("org.opencontainers.image.version") != tag:
        out.append(f"version label {labels.get('org.opencontainers.image.version')!r} is not the tag {tag!r}")
    if labels.get("org.opencontainers.image.title") != name:
        out.append(f"title label {labels.get('org.opencontainers.image.title')!r} is not {name!r}")
    out += [f"manifest annotation {label} missing" for label in LABELS if not image.annotations.get(label)]
    if image.ref_name != tag:
        out.append(f"ref name {image.ref_name!r} is not the tag {tag!r}")
    if cfg.get("Entrypoint"):
        out.append(f"entrypoint {cfg['Entrypoint']}: want none (the manifests' args replace the command)")
    if cfg.get("Cmd") != COMMAND[name]:
        out.append(f"command {cfg.get('Cmd')}: want {COMMAND[name]}")
    env = dict(e.split("=", 1) for e in cfg.get("Env") or [])
    if not env.get("PATH", "").startswith("/opt/venv/bin:"):
        out.append(f"env PATH={env.get('PATH')!r}: want the venv first")
    # A read-only root: nothing writes bytecode, and HOME and TMPDIR are the emptyDir at /tmp.
    for key, want in (("PYTHONDONTWRITEBYTECODE", "1"), ("HOME", "/tmp"), ("TMPDIR", "/tmp")):
        if env.get(key) != want:
            out.append(f"env {key}={env.get(key)!r}: want {want!r}")
    out += [f"forbidden in a runtime image: /{p}" for p in sorted(image.paths) if FORBIDDEN.search(p)]
    site = {re.sub(r"python3\.\d+", "python3.N", p) for p in image.paths}
    out += [f"missing: /{p}" for p in MUST_HOLD[name] if p not in site]
    return out


def built_archives() -> list[Path]:
    """The newest archive of each image in the cache."""
    newest: dict[str, Path] = {}
    for path in CACHE.glob("accel-*.oci.tar") if CACHE.is_dir() else ():
        m = ARCHIVE.match(path.name)
        if m and (m["name"] not in newest or path.stat().st_mtime > newest[m["name"]].stat().st_mtime):
            newest[m["name"]] = path
    return sorted(newest.values())


@pytest.mark.parametrize(
    "archive",
    built_archives()
    or [pytest.param(None, marks=pytest.mark.skip(reason="no images built: run `bash hack/dev.sh images`"))],
    ids=lambda p: p.name if isinstance(p, Path) else "none",
)
def test_a_built_image_is_non_root_labelled_and_without_compilers(archive: Path) -> None:
    m = ARCHIVE.match(archive.name)
    assert m is not None
    assert problems(read_image(archive), name=m["name"], tag=m["tag"]) == []


# --- the checker, on small archives made here ------------------------------------------------------


def _tar_bytes(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _write_archive(
    path: Path, *, config: dict[str, Any], rootfs: dict[str, bytes], annotations: dict[str, str], tag: str
) -> None:
    blobs: dict[str, bytes] = {}

    def add(data: bytes) -> dict[str, Any]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"digest": digest, "size": len(data)}

    layer = add(gzip.compress(_tar_bytes(rootfs)))
    manifest = {
        "schemaVersion": 2,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **add(json.dumps(config).encode())},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **layer}],
        "annotations": annotations,
    }
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                **add(json.dumps(manifest).encode()),
                "annotations": {"org.opencontainers.image.ref.name": tag},
            }
        ],
    }
    files = {"oci-layout": b'{"imageLayoutVersion": "1.0.0"}', "index.json": json.dumps(index).encode()}
    files.update({f"blobs/sha256/{d.removeprefix('sha256:')}": b for d, b in blobs.items()})
    path.write_bytes(_tar_bytes(files))


def _good(tag: str) -> tuple[dict[str, Any], dict[str, bytes], dict[str, str]]:
    labels = dict.fromkeys(LABELS, "x") | {
        "org.opencontainers.image.version": tag,
        "org.opencontainers.image.title": "accel-operator",
    }
    config = {
        "config": {
            "User": "65532:65532",
            "Labels": labels,
            "Cmd": COMMAND["accel-operator"],
            "Env": ["PATH=/opt/venv/bin:/usr/bin", "PYTHONDONTWRITEBYTECODE=1", "HOME=/tmp", "TMPDIR=/tmp"],
        }
    }
    rootfs = {p.replace("python3.N", "python3.11"): b"" for p in MUST_HOLD["accel-operator"]}
    rootfs["usr/bin/python3.11"] = b""
    return config, rootfs, dict(labels)


def test_the_checker_passes_a_right_image(tmp_path: Path) -> None:
    config, rootfs, annotations = _good("v1")
    _write_archive(tmp_path / "a.oci.tar", config=config, rootfs=rootfs, annotations=annotations, tag="v1")
    assert problems(read_image(tmp_path / "a.oci.tar"), name="accel-operator", tag="v1") == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda c, r: c["config"].update(User="0:0"), "user '0:0'"),
        (lambda c, r: c["config"].update(User="root"), "user 'root'"),
        (lambda c, r: c["config"].pop("User"), "user ''"),
        (lambda c, r: c["config"].update(User="65532:0"), "user '65532:0'"),
        (lambda c, r: c["config"]["Labels"].pop("org.opencontainers.image.revision"), "label org.opencontainers"),
        (lambda c, r: c["config"].update(Entrypoint=["/bin/sh"]), "entrypoint"),
        (lambda c, r: c["config"].update(Cmd=["/bin/sh"]), "command"),
        (lambda c, r: c["config"].update(Env=["PATH=/usr/bin"]), "env PYTHONDONTWRITEBYTECODE"),
        (lambda c, r: r.update({"usr/bin/gcc-12": b""}), "forbidden in a runtime image: /usr/bin/gcc-12"),
        (lambda c, r: r.update({"usr/bin/cc": b""}), "forbidden in a runtime image: /usr/bin/cc"),
        (lambda c, r: r.update({"opt/venv/bin/pip": b""}), "forbidden in a runtime image: /opt/venv/bin/pip"),
        (lambda c, r: r.pop("opt/venv/bin/accelctl"), "missing: /opt/venv/bin/accelctl"),
    ],
    ids=[
        *("root", "named-root", "no-user", "root-group", "label", "entrypoint", "command", "env"),
        *("gcc", "cc", "pip", "accelctl"),
    ],
)
def test_the_checker_fails_a_wrong_image(tmp_path: Path, change: Any, expected: str) -> None:
    config, rootfs, annotations = _good("v1")
    change(config, rootfs)
    _write_archive(tmp_path / "a.oci.tar", config=config, rootfs=rootfs, annotations=annotations, tag="v1")
    found = problems(read_image(tmp_path / "a.oci.tar"), name="accel-operator", tag="v1")
    assert any(p.startswith(expected) for p in found), found


def test_the_image_builds_long_steps_show_their_progress_on_a_terminal_only(tmp_path: Path) -> None:
    """``ticking`` (hack/images.sh): on a terminal a line redrawn with the seconds taken, then done
    or failed; elsewhere (CI logs) the command alone; its exit status either way."""
    import shutil
    import subprocess

    script = (ROOT / "hack" / "images.sh").read_text()
    found = re.search(r"^ticking\(\) \{\n.*?^\}\n", script, re.S | re.M)
    assert found, "hack/images.sh defines ticking()"
    test = tmp_path / "t.sh"
    test.write_text(
        "set -euo pipefail\n" + found.group(0) + 'ticking "step" sleep 1.5\nticking "bad" false || echo "rc=$?"\n'
    )
    plain = subprocess.run(["bash", str(test)], capture_output=True, text=True, check=True)
    assert plain.stdout == "rc=1\n" and plain.stderr == ""
    if shutil.which("script") is None:
        pytest.skip("no `script` to give the step a terminal")
    tty = subprocess.run(["script", "-qec", f"bash {test}", "/dev/null"], capture_output=True, text=True, check=True)
    assert "step: 1s" in tty.stdout and "step: done in" in tty.stdout
    assert "bad: failed in" in tty.stdout and "rc=1" in tty.stdout
