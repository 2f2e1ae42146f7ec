"""The dev tooling's one way to put objects into the local cluster: client, namespaces, CRDs, apply.

The demo, the cluster tests and ``accel-cluster nodes`` share these instead of each catching
404/409 by hand. ``apply`` is server-side apply through the dynamic client, so it works for
every kind (CRDs, RBAC, admission policies, accel.dev objects) and is idempotent.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config, dynamic
from kubernetes.client.exceptions import ApiException

from accel_localcluster.control_plane import REPO

FIELD_MANAGER = "accel-dev"
CRD_DIR = REPO / "crds"


def api_client(kubeconfig: Path | str) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(kubeconfig))


def core(kubeconfig: Path | str) -> client.CoreV1Api:
    return client.CoreV1Api(api_client(kubeconfig))


@contextlib.contextmanager
def ignoring(*statuses: int) -> Iterator[None]:
    """Swallow API errors with these HTTP statuses (404 on delete, 409 on create)."""
    try:
        yield
    except ApiException as exc:
        if exc.status not in statuses:
            raise


def wait_for(check: Any, *, timeout: float, what: str, interval: float = 0.25) -> Any:
    """Poll ``check()`` until it returns something truthy; TimeoutError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def ensure_namespace(api: client.ApiClient, name: str, labels: dict[str, str] | None = None) -> None:
    """Create ``name`` (with ``labels``) unless it exists, and wait for its default ServiceAccount."""
    core_api = client.CoreV1Api(api)
    with ignoring(409):
        core_api.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels)))

    def has_default_sa() -> bool:
        try:
            core_api.read_namespaced_service_account("default", name)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    # Pods need the namespace's default ServiceAccount, which the controller-manager creates.
    wait_for(has_default_sa, timeout=60, what=f"default ServiceAccount in {name}")


# A claim made by ensure_claim: its PersistentVolume carries the claim's namespace in this label
# (delete_claim_volumes removes them with the namespace).
CLAIM_NAMESPACE_LABEL = "accel.dev/claim-namespace"


def ensure_claim(api: client.ApiClient, namespace: str, name: str) -> None:
    """A bound PersistentVolumeClaim ``name`` in ``namespace`` (a pvc:// checkpoint's claim), on a
    PersistentVolume made for it and bound to it up front: kube-scheduler places a pod that mounts
    a claim only once the claim is bound. The volume is a host path no container ever opens (the
    nodes are KWOK's); waits until the claim is Bound."""
    core_api = client.CoreV1Api(api)
    volume = f"claim-{hashlib.sha256(f'{namespace}/{name}'.encode()).hexdigest()[:16]}"
    with ignoring(409):
        core_api.create_persistent_volume(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": volume, "labels": {CLAIM_NAMESPACE_LABEL: namespace}},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteMany"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": "",
                    "hostPath": {"path": f"/var/lib/accel-claims/{volume}"},
                    "claimRef": {"namespace": namespace, "name": name},
                },
            }
        )
    with ignoring(409):
        core_api.create_namespaced_persistent_volume_claim(
            namespace,
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": name},
                "spec": {
                    "accessModes": ["ReadWriteMany"],
                    "storageClassName": "",
                    "volumeName": volume,
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            },
        )
    wait_for(
        lambda: core_api.read_namespaced_persistent_volume_claim(name, namespace).status.phase == "Bound",
        timeout=60,
        what=f"the claim {namespace}/{name} bound",
    )


def delete_claim_volumes(api: client.ApiClient, namespace: str) -> None:
    """The PersistentVolumes ensure_claim made for ``namespace``'s claims (kept by Retain)."""
    core_api = client.CoreV1Api(api)
    for pv in core_api.list_persistent_volume(label_selector=f"{CLAIM_NAMESPACE_LABEL}={namespace}").items:
        with ignoring(404):
            core_api.delete_persistent_volume(pv.metadata.name)


def apply(api: client.ApiClient, doc: dict[str, Any], namespace: str | None = None) -> Any:
    """Server-side apply of one object of any kind (``namespace`` fills a namespaced one's gap)."""
    dyn = dynamic.DynamicClient(api)
    resource = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
    ns = doc.get("metadata", {}).get("namespace") or namespace if resource.namespaced else None
    return dyn.server_side_apply(
        resource,
        body=doc,
        name=doc["metadata"]["name"],
        namespace=ns,
        field_manager=FIELD_MANAGER,
        force_conflicts=True,
    )


def documents(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """The non-empty YAML documents of ``paths``, in order."""
    return [d for p in paths for d in yaml.safe_load_all(p.read_text(encoding="utf-8")) if d]


def apply_files(api: client.ApiClient, paths: Iterable[Path], namespace: str | None = None) -> list[str]:
    """Apply every object in ``paths`` exactly as written; ``kind/name`` of each."""
    return [f"{d['kind']}/{apply(api, d, namespace).metadata.name}" for d in documents(paths)]


def install_crds(api: client.ApiClient, crd_dir: Path = CRD_DIR) -> list[str]:
    """Apply every CRD in ``crd_dir`` (exactly those files) and wait until each is Established."""
    ext = client.ApiextensionsV1Api(api)
    names = []
    for doc in documents(sorted(crd_dir.glob("accelerator*.yaml"))):
        apply(api, doc)
        names.append(doc["metadata"]["name"])

    def established(name: str) -> bool:
        crd = ext.read_custom_resource_definition(name)
        return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))

    for name in names:
        wait_for(lambda n=name: established(n), timeout=60, what=f"CRD {name} Established")
    return names
