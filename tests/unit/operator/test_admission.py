"""The admission webhook's decision (``handlers.admission.review``) and its certificate."""

import ssl
from pathlib import Path
from typing import Any

import yaml

from accel_api.policy import AcceleratorPolicy
from accel_operator.handlers import admission
from tests.support.hostile import EXAMPLES

POLICY = AcceleratorPolicy.model_validate(yaml.safe_load(EXAMPLES["20-policy.yaml"]))


def _job(**spec: Any) -> dict[str, Any]:
    doc: dict[str, Any] = next(d for d in yaml.safe_load_all(EXAMPLES["02-multinode-spot-training.yaml"]) if d)
    doc["spec"].update(spec)
    return doc


def test_obeying_job_is_allowed() -> None:
    assert admission.review(_job(), "research", [POLICY]) == []


def test_each_violation_is_one_line() -> None:
    lines = admission.review(_job(checkpoint=None, team="serving", maxCost=None), "research", [POLICY])
    assert [line.split(" ")[0] for line in lines] == ["spec.team:", "spec.checkpoint:"]
    assert all("(rule " in line for line in lines)


def test_invalid_spec_gets_the_models_lines() -> None:
    lines = admission.review(_job(placement={"minDevices": 8, "maxDevices": 4}), None, [])
    assert lines == ["spec.placement: maxDevices must be >= minDevices (got maxDevices 4, minDevices 8)"]


def test_budget_exhaustion_is_not_refused_here() -> None:
    # the webhook passes no spend: budgets are the reconciler's (queue, not refuse)
    assert admission.review(_job(), "research", [POLICY]) == []


def test_objects_being_deleted_are_never_refused() -> None:
    doc = _job(team="serving")
    doc["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert admission.review(doc, "research", [POLICY]) == []


def test_self_signed_certificate_loads_and_names_the_host(tmp_path: Path) -> None:
    cert, key, ca = admission.self_signed("127.0.0.1", tmp_path)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    client = ssl.create_default_context(cadata=ca.decode())
    assert client.cert_store_stats()["x509_ca"] == 1
    assert (key.stat().st_mode & 0o777) == 0o600
