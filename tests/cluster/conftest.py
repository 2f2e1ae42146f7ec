"""Fixtures for tests against the real local control plane.

The cluster is started once per test session (built first if needed) and stopped at the end
unless it was already running or ACCEL_CLUSTER_KEEP=1. The CRDs from crds/ are applied once.
Each test gets a fresh namespace. ``operator`` runs the kopf operator in-process and fails the
test when the operator logged an error the test did not declare with ``expect_errors``.
"""

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config

from accel_localcluster import Cluster, default_cluster, kubeapi
from tests.support.cluster import install_crds
from tests.support.operator import checked_operator, settings_for


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/cluster/" in str(item.fspath):
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    c = default_cluster()
    was_running = c.healthy()
    # A control plane that cannot be built or started fails the tests; it never skips them.
    c.up(build=not was_running, timeout=300)
    os.environ["KUBECONFIG"] = str(c.kubeconfig)
    yield c
    if not was_running and os.environ.get("ACCEL_CLUSTER_KEEP") != "1":
        c.down()


@pytest.fixture(scope="session")
def api(cluster: Cluster) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(cluster.kubeconfig))


@pytest.fixture(scope="session")
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture(scope="session")
def crds(api: client.ApiClient) -> list[str]:
    """Apply every CRD in crds/ (exactly those files) and wait until each is Established."""
    return install_crds(api)


@pytest.fixture
def namespace(core: client.CoreV1Api) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    kubeapi.ensure_namespace(core.api_client, name)
    yield name
    core.delete_namespace(name, propagation_policy="Background", grace_period_seconds=0)
    kubeapi.delete_claim_volumes(core.api_client, name)  # the volumes of its checkpoint claims


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "expect_errors(*patterns): operator log errors this test expects")


@pytest.fixture
def operator(cluster: Cluster, crds: list[str], namespace: str, request: pytest.FixtureRequest) -> Iterator[Any]:
    """The operator running in-process (``accel_operator.app.run``) for one test, watching the
    test's namespace (cluster-scoped pools and nodes as always), so that the jobs other tests left
    in namespaces being deleted do not reach it.

    After the test, any ERROR/CRITICAL/Traceback line in its log that matches no pattern of the
    test's ``expect_errors`` marker fails the test.
    """
    marker = request.node.get_closest_marker("expect_errors")
    expected = list(marker.args) if marker else []
    with checked_operator(settings_for(namespace), *expected) as runner:
        yield runner
