"""Helpers for tests against the local control plane (fixtures live in tests/cluster/conftest.py).

Applying objects goes through the dev tooling's one module (``accel_localcluster.kubeapi``);
what is here is the test-side part: waiting that fails the test, and reading the operator's log.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from accel_localcluster import kubeapi

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for a metrics, webhook or stand-in port)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for(check: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.25) -> Any:
    """Poll ``check`` until it returns something truthy; fail the test naming ``what``."""
    end = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < end:
        last = check()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


ERROR_LINE = re.compile(r"\b(ERROR|CRITICAL)\b|Traceback")
# kopf logs a retried request at ERROR; a retry is not a failure (the control plane may still be
# starting, "storage is (re)initializing").
RETRIED = re.compile(r"Request attempt #\d+/\d+ failed; will retry")


def unexpected_errors(log: str, expected: list[str]) -> list[str]:
    """Lines of ``log`` that report an error matching none of the ``expected`` patterns."""
    found = []
    for line in log.splitlines():
        if ERROR_LINE.search(line) and not RETRIED.search(line) and not any(re.search(p, line) for p in expected):
            found.append(line)
    return found


def apply_manifests(api: client.ApiClient, paths: list[Path], namespace: str = "accel-system") -> None:
    """Apply the objects in ``paths`` exactly as written (server-side apply, so a changed role
    takes effect in this run): the RBAC a test exercises is the one the manifests ship."""
    kubeapi.ensure_namespace(api, namespace)
    kubeapi.apply_files(api, paths, namespace)


def install_crds(api: client.ApiClient) -> list[str]:
    return kubeapi.install_crds(api, ROOT / "crds")


def token_kubeconfig(api: client.ApiClient, core: client.CoreV1Api, tmp: Path) -> Path:
    """Install manifests/operator/rbac.yaml (and write-guard.yaml, the admission policy on its
    writes to pods and nodes) and return a kubeconfig with the ServiceAccount's token: an
    operator started with it has exactly the rights the manifests ship."""
    apply_manifests(api, [ROOT / "manifests" / "operator" / n for n in ("rbac.yaml", "write-guard.yaml")])
    token = core.create_namespaced_service_account_token(
        "accel-operator",
        "accel-system",
        client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)),
    ).status.token
    admin = yaml.safe_load(Path(os.environ["KUBECONFIG"]).read_text())
    admin["users"] = [{"name": "accel-admin", "user": {"token": token}}]
    path = tmp / "operator-kubeconfig"
    path.write_text(yaml.safe_dump(admin))
    return path
