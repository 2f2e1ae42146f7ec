"""``accelctl validate [--policy POLICY.yaml] [--namespace-team TEAM] FILE...``: check resources
against the models and report every problem; with ``--policy``, also evaluate each AcceleratorJob
against the policies offline (``planning.policy.evaluate``, as admission does) and report each
violation with its field path, policy, rule and fix."""

import argparse

from accel_api import AcceleratorJob, AcceleratorPolicy, InvalidResource
from accel_api.base import ApiModel
from accel_operator.cli import inputs
from accel_operator.cli.errors import UsageError
from accel_operator.planning import policy

NAME = "validate"
HELP = "Validate AcceleratorJob/Pool/Policy/NodeReport YAML; print each problem with its field path."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="YAML files, or - for stdin")
    parser.add_argument(
        "--policy",
        action="append",
        default=[],
        metavar="POLICY.yaml",
        help="also check each AcceleratorJob against the AcceleratorPolicy objects in this file (repeatable)",
    )
    parser.add_argument(
        "--namespace-team",
        metavar="TEAM",
        help="the team label of the jobs' namespace: a job must name this team (default: not checked)",
    )


def _policies(paths: list[str]) -> list[AcceleratorPolicy]:
    found: list[AcceleratorPolicy] = []
    for path in paths:
        for res in inputs.read_resources(path):
            if not isinstance(res, AcceleratorPolicy):
                raise UsageError(f"{path}: --policy takes AcceleratorPolicy objects (got {type(res).__name__})")
            found.append(res)
    return found


def _breaches(res: ApiModel, policies: list[AcceleratorPolicy], team: str | None) -> list[str]:
    if not isinstance(res, AcceleratorJob):
        return []
    return [str(v) for v in policy.evaluate(res.spec, team, policies)]


def _check(path: str, policies: list[AcceleratorPolicy], team: str | None, checking: bool) -> list[str]:
    """Print each valid resource of ``path``; return the policy breaches of its jobs."""
    problems: list[str] = []
    for res in inputs.read_resources(path):
        meta = getattr(res, "metadata", None)
        label = f"{type(res).__name__}/{getattr(meta, 'name', None) or '(unnamed)'}"
        breaches = _breaches(res, policies, team) if checking else []
        problems.extend(f"{label}: {b}" for b in breaches)
        if breaches:
            continue
        if checking and isinstance(res, AcceleratorJob):
            print(f"{path}: {label} is valid and obeys {len(policies)} polic{'y' if len(policies) == 1 else 'ies'}")
        else:
            print(f"{path}: {label} is valid")
    return problems


def run(args: argparse.Namespace) -> int:
    policies = _policies(args.policy)
    checking = bool(policies) or args.namespace_team is not None
    failed: list[InvalidResource] = []
    for path in args.files:
        try:
            problems = _check(path, policies, args.namespace_team, checking)
        except InvalidResource as exc:
            failed.append(exc)
            continue
        if problems:
            failed.append(InvalidResource(problems, path))
    if len(failed) == 1:
        raise failed[0]
    if failed:
        raise InvalidResource([f"{e.source}: {p}" for e in failed for p in e.problems])
    return 0
