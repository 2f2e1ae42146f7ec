"""``accelctl crds``: (re)generate ``crds/*.yaml`` from the models, or check them for drift."""

import argparse
import sys
from pathlib import Path

from accel_api import crdgen

NAME = "crds"
HELP = "Write the CRDs generated from the models into a folder (default crds/), or --check for drift."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="crds", help="folder to write into (default: crds)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the folder differs")


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    files = crdgen.render_all()
    if args.check:
        stale = [n for n, text in files.items() if not (out / n).is_file() or (out / n).read_text() != text]
        for n in stale:
            print(f"{out / n}: out of date; run `accelctl crds`", file=sys.stderr)
        return 1 if stale else 0
    out.mkdir(parents=True, exist_ok=True)
    for n, text in files.items():
        (out / n).write_text(text)
        print(f"wrote {out / n}")
    return 0
