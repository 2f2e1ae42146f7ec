"""``accelctl`` entry point: one subcommand per module, each registering its own arguments.

Bad input never shows a traceback: :class:`accel_api.InvalidResource` and :class:`UsageError`
become ``error: <field path>: <reason>`` lines on stderr and exit status 2, at most
``errors.MAX_PROBLEMS`` of them and then a count of the rest.
"""

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Protocol

from accel_api import InvalidResource, errors
from accel_operator.cli.errors import UsageError


class Subcommand(Protocol):
    NAME: str
    HELP: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


def _subcommands() -> list[Subcommand]:
    from accel_operator.cli import cost, crds, plan, validate

    return [validate, crds, plan, cost]


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, Callable[[argparse.Namespace], int]]]:
    parser = argparse.ArgumentParser(
        prog="accelctl", description="Plan, validate and run accelerator jobs (accel.dev/v1alpha1)."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    runners: dict[str, Callable[[argparse.Namespace], int]] = {}
    for cmd in _subcommands():
        p = sub.add_parser(cmd.NAME, help=cmd.HELP, description=cmd.HELP)
        cmd.add_arguments(p)
        runners[cmd.NAME] = cmd.run
    return parser, runners


def main(argv: Sequence[str] | None = None) -> int:
    parser, runners = build_parser()
    args = parser.parse_args(argv)
    try:
        return runners[args.command](args)
    except InvalidResource as exc:
        where = f"{exc.source}: " if exc.source else ""
        for line in errors.cap(exc.problems):
            print(f"error: {where}{' '.join(line.splitlines())}", file=sys.stderr)
        return 2
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`accelctl plan ... | head`): not an error, and no traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
