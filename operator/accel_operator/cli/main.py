"""``accelctl`` and ``kubectl accel`` entry points (one implementation, two names): one
subcommand per module, each registering its own arguments.

Exit status: 0 done; 1 a runtime error (:class:`RuntimeFailure`: the cluster unreachable, a job
not found); 2 usage or invalid input. Bad input never shows a traceback:
:class:`accel_api.InvalidResource` and :class:`UsageError` become ``error: <field path>: <reason>``
lines on stderr, at most ``errors.MAX_PROBLEMS`` of them and then a count of the rest.
"""

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Protocol

from accel_api import InvalidResource, errors
from accel_operator.cli import colour
from accel_operator.cli.errors import RuntimeFailure, UsageError

EXIT_OK, EXIT_RUNTIME, EXIT_USAGE = 0, 1, 2


class Subcommand(Protocol):
    NAME: str
    HELP: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


def _subcommands() -> list[Subcommand]:
    from accel_operator.cli import completion, cost, crds, jobs, plan, simulate, top, validate

    return [validate, crds, plan, jobs.Why, top.Top, cost, simulate, jobs.Resume, jobs.Stop, completion]


def version() -> str:
    """The installed distribution's version: the release's, which is also the images' tag."""
    from importlib import metadata

    try:
        return metadata.version("accel-operator")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def build_parser(
    prog: str = "accelctl",
) -> tuple[argparse.ArgumentParser, dict[str, Callable[[argparse.Namespace], int]]]:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Plan, validate and run accelerator jobs (accel.dev/v1alpha1).",
        epilog="Exit status: 0 done, 1 runtime error (e.g. the cluster unreachable), 2 usage or invalid input.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    runners: dict[str, Callable[[argparse.Namespace], int]] = {}
    for cmd in _subcommands():
        p = sub.add_parser(cmd.NAME, help=cmd.HELP, description=cmd.HELP)
        cmd.add_arguments(p)
        runners[cmd.NAME] = cmd.run
    parser.set_defaults(root_parser=parser)  # for `completion`, which describes the whole tree
    return parser, runners


def _error(message: str) -> None:
    print(f"{colour.paint('error:', 'red', sys.stderr)} {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None, prog: str = "accelctl") -> int:
    parser, runners = build_parser(prog)
    args = parser.parse_args(argv)  # argparse exits 2 on bad usage, as documented
    try:
        return runners[args.command](args)
    except InvalidResource as exc:
        where = f"{exc.source}: " if exc.source else ""
        for line in errors.cap(exc.problems):
            _error(f"{where}{' '.join(line.splitlines())}")
        return EXIT_USAGE
    except UsageError as exc:
        _error(str(exc))
        return EXIT_USAGE
    except RuntimeFailure as exc:
        _error(str(exc))
        return EXIT_RUNTIME
    except BrokenPipeError:
        # The reader went away (`accelctl plan ... | head`): not an error, and no traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def kubectl_main() -> int:
    """``kubectl-accel``: kubectl runs it as ``kubectl accel ...`` when it is on PATH."""
    return main(prog="kubectl accel")


if __name__ == "__main__":
    sys.exit(main())
