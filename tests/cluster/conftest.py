"""Fixtures for tests against the real local control plane.

The cluster is started once per test session (built first if needed) and stopped at the end
unless it was already running or ACCEL_CLUSTER_KEEP=1. The CRDs from crds/ are applied once.
Each test gets a fresh namespace. ``operator`` runs the kopf operator in-process and fails the
test when the operator logged an error the test did not declare with ``expect_errors``.
"""

import functools
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from accel_localcluster import Cluster, default_cluster

ROOT = Path(__file__).resolve().parents[2]


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


def install_crds(api: client.ApiClient) -> list[str]:
    ext = client.ApiextensionsV1Api(api)
    names = []
    for path in sorted((ROOT / "crds").glob("accelerator*.yaml")):
        body = yaml.safe_load(path.read_text())
        name = body["metadata"]["name"]
        names.append(name)
        try:
            current = ext.read_custom_resource_definition(name)
            body["metadata"]["resourceVersion"] = current.metadata.resource_version
            ext.replace_custom_resource_definition(name, body)
        except ApiException as exc:
            if exc.status != 404:
                raise
            ext.create_custom_resource_definition(body)
    for name in names:
        wait_for(functools.partial(_established, ext, name), timeout=60, what=f"CRD {name} Established")
    return names


def _established(ext: client.ApiextensionsV1Api, name: str) -> bool:
    crd = ext.read_custom_resource_definition(name)
    return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))


@pytest.fixture
def namespace(core: client.CoreV1Api) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    # Pods need the namespace's default ServiceAccount, which the controller-manager creates.
    wait_for(lambda: _has_default_sa(core, name), timeout=60, what=f"default ServiceAccount in {name}")
    yield name
    core.delete_namespace(name, propagation_policy="Background", grace_period_seconds=0)


def _has_default_sa(core: client.CoreV1Api, ns: str) -> bool:
    try:
        core.read_namespaced_service_account("default", ns)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


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


def unexpected_errors(log: str, expected: list[str]) -> list[str]:
    """Lines of ``log`` that report an error matching none of the ``expected`` patterns."""
    found = []
    for line in log.splitlines():
        if ERROR_LINE.search(line) and not any(re.search(p, line) for p in expected):
            found.append(line)
    return found


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "expect_errors(*patterns): operator log errors this test expects")


@pytest.fixture
def operator(cluster: Cluster, crds: list[str], request: pytest.FixtureRequest) -> Iterator[Any]:
    """The operator running in-process (kopf's KopfRunner) for one test.

    After the test, any ERROR/CRITICAL/Traceback line in its log that matches no pattern of the
    test's ``expect_errors`` marker fails the test.
    """
    from kopf.testing import KopfRunner

    marker = request.node.get_closest_marker("expect_errors")
    expected = list(marker.args) if marker else []
    args = ["run", "--all-namespaces", "--standalone", "--verbose", "-m", "accel_operator.handlers.jobs"]
    with KopfRunner(args, timeout=60) as runner:
        yield runner
    assert runner.exit_code == 0, runner.output
    assert runner.exception is None, runner.exception
    errors = unexpected_errors(runner.output, expected)
    assert not errors, "the operator logged errors the test did not expect:\n" + "\n".join(errors)


def apply_manifests(api: client.ApiClient, paths: list[Path], namespace: str = "accel-system") -> None:
    """Create (or, for roles, replace) the objects in ``paths`` exactly as written: the RBAC a
    test exercises is the one the manifests ship."""
    core = client.CoreV1Api(api)
    rbac = client.RbacAuthorizationV1Api(api)
    adm = client.AdmissionregistrationV1Api(api)
    try:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    except ApiException as exc:
        if exc.status != 409:
            raise
    creators: dict[str, Callable[[dict[str, Any]], Any]] = {
        "ServiceAccount": lambda d: core.create_namespaced_service_account(namespace, d),
        "ClusterRole": rbac.create_cluster_role,
        "ClusterRoleBinding": rbac.create_cluster_role_binding,
        "ValidatingAdmissionPolicy": adm.create_validating_admission_policy,
        "ValidatingAdmissionPolicyBinding": adm.create_validating_admission_policy_binding,
    }
    replacers: dict[str, Callable[[str, dict[str, Any]], Any]] = {
        "ClusterRole": rbac.replace_cluster_role,
        "ValidatingAdmissionPolicy": adm.replace_validating_admission_policy,
        # A binding from an earlier run must not outlive a policy whose params it has to name.
        "ValidatingAdmissionPolicyBinding": adm.replace_validating_admission_policy_binding,
    }
    for path in paths:
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            try:
                creators[doc["kind"]](doc)
            except ApiException as exc:
                if exc.status != 409:
                    raise
                if doc["kind"] in replacers:  # a changed role must take effect in this run
                    current = {
                        "ClusterRole": rbac.read_cluster_role,
                        "ValidatingAdmissionPolicy": adm.read_validating_admission_policy,
                        "ValidatingAdmissionPolicyBinding": adm.read_validating_admission_policy_binding,
                    }[doc["kind"]](doc["metadata"]["name"])
                    doc["metadata"]["resourceVersion"] = current.metadata.resource_version
                    replacers[doc["kind"]](doc["metadata"]["name"], doc)
