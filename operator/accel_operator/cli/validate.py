"""``accelctl validate FILE...``: check resources against the models, report every problem."""

import argparse

from accel_api import InvalidResource
from accel_operator.cli import inputs

NAME = "validate"
HELP = "Validate AcceleratorJob/Pool/Policy/NodeReport YAML; print each problem with its field path."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="YAML files, or - for stdin")


def run(args: argparse.Namespace) -> int:
    failed: list[InvalidResource] = []
    for path in args.files:
        try:
            for res in inputs.read_resources(path):
                meta = getattr(res, "metadata", None)
                name = getattr(meta, "name", None) or "(unnamed)"
                print(f"{path}: {type(res).__name__}/{name} is valid")
        except InvalidResource as exc:
            failed.append(exc)
    if len(failed) == 1:
        raise failed[0]
    if failed:
        raise InvalidResource([f"{e.source}: {p}" for e in failed for p in e.problems])
    return 0
