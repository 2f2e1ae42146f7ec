"""The kubectl habits of every command that reads a cluster: ``--kubeconfig``, ``--context``,
``-n/--namespace`` (the kubeconfig context's namespace by default, ``default`` when it names
none, as kubectl) and ``-A/--all-namespaces``; and the one place a CLI command gets its client.

A cluster that cannot be reached is a :class:`RuntimeFailure` (exit 1); a kubeconfig or context
that does not exist is the user's input, a :class:`UsageError` (exit 2). Neither shows a traceback.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from accel_operator.cli.errors import RuntimeFailure, UsageError

DEFAULT_NAMESPACE = "default"


def add_arguments(parser: argparse.ArgumentParser, *, all_namespaces: bool = True) -> None:
    """The cluster flags on ``parser``; ``all_namespaces``: whether ``-A`` makes sense there."""
    group = parser.add_argument_group("cluster (as kubectl)")
    group.add_argument(
        "--kubeconfig", metavar="FILE", help="the kubeconfig to use (default: $KUBECONFIG, ~/.kube/config)"
    )
    group.add_argument("--context", metavar="NAME", help="the kubeconfig context to use (default: its current one)")
    group.add_argument(
        "-n", "--namespace", metavar="NS", help="the namespace (default: the context's namespace, else default)"
    )
    if all_namespaces:
        group.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")


def _check_kubeconfig(path: str | None) -> None:
    if path is None:
        return
    p = Path(path)
    if not p.exists():
        raise UsageError(f"--kubeconfig: {path[:256]}: no such file")
    if p.is_dir():
        raise UsageError(f"--kubeconfig: {path[:256]}: is a folder, not a file")
    if not os.access(p, os.R_OK):
        raise UsageError(f"--kubeconfig: {path[:256]}: not readable (permission denied)")


def namespace(args: argparse.Namespace) -> str | None:
    """The namespace to read: ``-n``, else None for ``-A``, else the context's, else ``default``."""
    if getattr(args, "all_namespaces", False):
        if args.namespace:
            raise UsageError("-n/--namespace and -A/--all-namespaces exclude each other: give one")
        return None
    if args.namespace:
        return str(args.namespace)
    return context_namespace(args.kubeconfig, args.context)


def context_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace the kubeconfig's context names (``default`` if none, or no kubeconfig)."""
    from accel_operator.adapters.kube import jobaccess

    _check_kubeconfig(kubeconfig)
    if os.environ.get("KUBERNETES_SERVICE_HOST") and kubeconfig is None and context is None:
        sa = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")  # in a pod, as kubectl
        try:
            return sa.read_text(encoding="utf-8").strip() or DEFAULT_NAMESPACE
        except OSError:
            return DEFAULT_NAMESPACE
    try:
        return jobaccess.context_namespace(kubeconfig, context) or DEFAULT_NAMESPACE
    except jobaccess.BadKubeconfig as exc:
        raise UsageError(f"--context: {exc}") from None


def client(args: argparse.Namespace) -> Any:
    """A Kubernetes ApiClient for ``--kubeconfig``/``--context``; a one-line error when none can be made."""
    from accel_operator.adapters.kube import jobaccess

    _check_kubeconfig(args.kubeconfig)
    try:
        return jobaccess.connect(args.kubeconfig, args.context)
    except jobaccess.BadKubeconfig as exc:
        if args.context is not None and args.context in str(exc):
            raise UsageError(f"--context: {exc}") from None
        raise RuntimeFailure(f"cannot reach the cluster: no usable kubeconfig ({exc})") from None


def unreachable(exc: Exception) -> RuntimeFailure:
    """The one-line error for a call the cluster did not answer."""
    return RuntimeFailure(f"cannot reach the cluster: {' '.join(str(exc).split())[:300]}")
