"""A CRD's schema without one of its rules for a moment, as an older release had it: how a test
stores an object that today's CRD refuses (the upgrade that tightens a rule), so the operator's
own handling of an object its models refuse can be seen."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes import client

from tests.support.cluster import wait_for

SPEC = "/spec/versions/0/schema/openAPIV3Schema/properties/spec"


def _at(node: Any, pointer: str) -> Any:
    for part in pointer.strip("/").split("/"):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def stores(create: Callable[[], Any]) -> Callable[[], bool]:
    """A probe: whether ``create`` (a dry-run create) is accepted (False on a 422)."""

    def probe() -> bool:
        try:
            create()
        except client.ApiException as exc:
            if exc.status == 422:
                return False
            raise
        return True

    return probe


@contextmanager
def without(api: client.ApiClient, crd_name: str, pointer: str, probe: Callable[[], bool]) -> Iterator[Any]:
    """The CRD ``crd_name`` without the schema value at JSON ``pointer``, restored afterwards.
    Waits until ``probe`` says the API server stores the refused object, and after the restore
    until it refuses it again. Yields the value removed."""
    ext = client.ApiextensionsV1Api(api)
    crd = json.loads(ext.read_custom_resource_definition(crd_name, _preload_content=False).data)
    value = _at(crd, pointer)
    ext.patch_custom_resource_definition(crd_name, [{"op": "remove", "path": pointer}])
    try:
        wait_for(probe, timeout=30, what="the relaxed schema in force")
        yield value
    finally:
        ext.patch_custom_resource_definition(crd_name, [{"op": "add", "path": pointer, "value": value}])
        wait_for(lambda: not probe(), timeout=30, what="the CRD's schema restored")
