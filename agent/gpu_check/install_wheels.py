"""Unpack wheels into a folder without pip: the fallback of ``run.sh`` where pip is missing or fails.

``python3 install_wheels.py WHEEL_DIR TARGET DIST [DIST ...]`` picks, for each distribution name,
the newest wheel in WHEEL_DIR that this interpreter can use (``py3``/``cpXY`` tags, ``none``/``abi3``/
``cpXY`` ABI, ``any`` or ``manylinux*_x86_64``) and extracts it into TARGET, which then goes on
PYTHONPATH. No dependency resolution: name every distribution needed. Exit 1 if one is missing.
"""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

_WHEEL = re.compile(r"^(?P<name>.+?)-(?P<version>[^-]+)(-\d[^-]*)?-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))


def compatible(py: str, abi: str, plat: str) -> bool:
    major, minor = sys.version_info[:2]
    cp = f"cp{major}{minor}"
    pys = set(py.split("."))
    abis = set(abi.split("."))
    plats = set(plat.split("."))
    py_ok = bool(pys & {"py3", f"py{major}{minor}", cp})
    if not py_ok and "abi3" in abis:
        py_ok = any(t.startswith("cp3") and t[2:].isdigit() and int(t[3:]) <= minor for t in pys)
    abi_ok = bool(abis & {"none", "abi3", cp})
    plat_ok = "any" in plats or any(p.endswith("x86_64") and p.startswith("manylinux") for p in plats)
    return py_ok and abi_ok and plat_ok


def pick(wheel_dir: Path, dist: str) -> Path | None:
    best: tuple[tuple[int, ...], Path] | None = None
    for path in wheel_dir.glob("*.whl"):
        m = _WHEEL.match(path.name)
        if not m or _norm(m["name"]) != _norm(dist) or not compatible(m["py"], m["abi"], m["plat"]):
            continue
        key = _version_key(m["version"])
        if best is None or key > best[0]:
            best = (key, path)
    return best[1] if best else None


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        sys.stderr.write(__doc__ or "")
        return 2
    wheel_dir, target, dists = Path(argv[0]), Path(argv[1]), argv[2:]
    target.mkdir(parents=True, exist_ok=True)
    missing = []
    for dist in dists:
        wheel = pick(wheel_dir, dist)
        if wheel is None:
            missing.append(dist)
            continue
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(target)
        print(f"unpacked {wheel.name}")
    if missing:
        sys.stderr.write(f"no usable wheel for: {', '.join(missing)}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
