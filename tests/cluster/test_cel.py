"""The real API server refuses each cross-field rule breach by itself (CEL in the CRDs, no
webhook, no operator), with the rule's message; the fixed document is accepted."""

import copy
import json
from typing import Any

import pytest
from kubernetes import client

from accel_api import registry
from accel_api import vocabulary as v
from tests.support.cel_cases import CASES, Case


def _create(api: client.ApiClient, namespace: str, doc: dict[str, Any], name: str) -> None:
    doc = copy.deepcopy(doc)
    doc["metadata"] = {"name": name}
    custom = client.CustomObjectsApi(api)
    if doc["kind"] == registry.JOB.kind:
        doc["metadata"]["namespace"] = namespace
        custom.create_namespaced_custom_object(v.GROUP, v.VERSION, namespace, registry.JOB.plural, doc)
    else:
        plural = registry.POOL.plural
        custom.create_cluster_custom_object(v.GROUP, v.VERSION, plural, doc)
        custom.delete_cluster_custom_object(v.GROUP, v.VERSION, plural, name)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_api_server_refuses_each_rule_breach(
    api: client.ApiClient, crds: list[str], namespace: str, case: Case
) -> None:
    name = f"cel-{namespace}-{CASES.index(case)}"
    with pytest.raises(client.ApiException) as info:
        _create(api, namespace, case.doc, name)
    assert info.value.status == 422, info.value.body
    body = json.loads(info.value.body)
    assert case.message in body["message"], body["message"]
    _create(api, namespace, case.fixed, name)
