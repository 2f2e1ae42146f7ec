"""The admission webhook's decision (``engine.admission.review``), its certificate
(``adapters.kube.tls``) and its server (``handlers.admission``)."""

import contextlib
import ssl
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from accel_api.policy import AcceleratorPolicy
from accel_operator.adapters.kube import tls
from accel_operator.engine import admission as engine_admission
from accel_operator.handlers import admission
from accel_operator.settings import OperatorSettings
from tests.support.hostile import EXAMPLES

POLICY = AcceleratorPolicy.model_validate(yaml.safe_load(EXAMPLES["20-policy.yaml"]))


def _job(**spec: Any) -> dict[str, Any]:
    doc: dict[str, Any] = next(d for d in yaml.safe_load_all(EXAMPLES["02-multinode-spot-training.yaml"]) if d)
    doc["spec"].update(spec)
    return doc


def test_obeying_job_is_allowed() -> None:
    assert engine_admission.review(_job(), "research", [POLICY]) == []


def test_each_violation_is_one_line() -> None:
    lines = engine_admission.review(_job(checkpoint=None, team="serving", maxCost=None), "research", [POLICY])
    assert [line.split(" ")[0] for line in lines] == ["spec.team:", "spec.checkpoint:"]
    assert all("(rule " in line for line in lines)


def test_invalid_spec_gets_the_models_lines() -> None:
    lines = engine_admission.review(_job(placement={"minDevices": 8, "maxDevices": 4}), None, [])
    assert lines == ["spec.placement: maxDevices must be >= minDevices (got maxDevices 4, minDevices 8)"]


def test_budget_exhaustion_is_not_refused_here() -> None:
    # the webhook passes no spend: budgets are the reconciler's (queue, not refuse)
    assert engine_admission.review(_job(), "research", [POLICY]) == []


def test_a_refusing_budget_that_is_spent_refuses_here() -> None:
    # The spend comes from the policy's status (the cost ledger's seam); only onExhausted: refuse refuses.
    def pol(action: str) -> AcceleratorPolicy:
        return AcceleratorPolicy.model_validate(
            {
                "metadata": {"name": "budget"},
                "spec": {"budgets": [{"team": "research", "limitUsd": 100, "onExhausted": action}]},
                "status": {"spend": [{"team": "research", "period": "monthly", "spentUsd": 100, "limitUsd": 100}]},
            }
        )

    lines = engine_admission.review(_job(maxCost=None), "research", [POLICY, pol("refuse")])
    assert [line.split("(rule ")[1] for line in lines] == [
        "budget-exhausted); fix: submit it again in the next "
        "monthly period, or ask the platform team for a larger budget"
    ]
    assert engine_admission.review(_job(maxCost=None), "research", [POLICY, pol("queue")]) == []


def test_objects_being_deleted_are_never_refused() -> None:
    doc = _job(team="serving")
    doc["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert engine_admission.review(doc, "research", [POLICY]) == []


def test_self_signed_certificate_loads_and_names_the_host(tmp_path: Path) -> None:
    cert, key, ca = tls.self_signed(["127.0.0.1"], tmp_path)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    client = ssl.create_default_context(cadata=ca.decode())
    assert client.cert_store_stats()["x509_ca"] == 1
    assert (key.stat().st_mode & 0o777) == 0o600


def test_the_certificate_names_the_service(tmp_path: Path) -> None:
    from cryptography import x509

    names = tls.sans_for("", "accel-operator-webhook", "accel-system")
    assert names == ["accel-operator-webhook.accel-system.svc", "accel-operator-webhook.accel-system.svc.cluster.local"]
    cert, _key, _ca = tls.self_signed(["10.0.0.7", *names], tmp_path)
    sans = x509.load_pem_x509_certificate(cert.read_bytes()).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert [str(ip) for ip in sans.value.get_values_for_type(x509.IPAddress)] == ["10.0.0.7"]
    assert sans.value.get_values_for_type(x509.DNSName) == names


@pytest.mark.parametrize(
    ("spec", "namespace_team", "expected"),
    [
        ({"image": "x"}, "research", "research"),  # missing: the namespace's team
        ({"image": "x", "team": ""}, "research", "research"),
        ({"image": "x", "team": "serving"}, "research", None),  # named: the validating webhook judges it
        ({"image": "x"}, None, None),  # unlabelled namespace: the schema refuses the job
    ],
)
def test_a_missing_team_defaults_to_the_namespaces(
    spec: dict[str, Any], namespace_team: str | None, expected: str | None
) -> None:
    assert engine_admission.default_team({"spec": spec}, namespace_team) == expected


def test_in_a_cluster_the_api_server_calls_the_service(tmp_path: Path) -> None:
    server = admission.webhook_server(OperatorSettings(webhook_port=9443))
    assert isinstance(server, admission.ServiceWebhookServer)
    assert server.service == {
        "name": "accel-operator-webhook",
        "namespace": "accel-system",
        "port": 443,
        "path": "",
    }
    local = admission.webhook_server(OperatorSettings(webhook_port=9443, webhook_host="127.0.0.1"))
    assert not isinstance(local, admission.ServiceWebhookServer) and local.host == "127.0.0.1"
    server.forget_key()
    local.forget_key()


def test_a_mounted_certificate_is_used(tmp_path: Path) -> None:
    cert, key, _ca = tls.self_signed(["accel-operator-webhook.accel-system.svc"], tmp_path)
    (tmp_path / "ca.crt").write_bytes(cert.read_bytes())
    server = admission.webhook_server(OperatorSettings(webhook_port=9443, webhook_cert_dir=tmp_path))
    assert server.certfile == cert and server.pkeyfile == key and server.cafile == tmp_path / "ca.crt"


def test_the_service_server_announces_a_service_reference() -> None:
    import asyncio

    server = admission.webhook_server(OperatorSettings(webhook_port=0, webhook_address="127.0.0.1"))

    async def first() -> Any:
        async def fn(*_: Any, **__: Any) -> Any:
            raise AssertionError("no request is made")

        configs = server(fn)
        try:
            return await anext(configs)
        finally:
            await cast(AsyncGenerator[Any, None], configs).aclose()

    key_dir = server.key_dir
    assert key_dir is not None and (key_dir / "tls.key").is_file()
    config = asyncio.run(first())
    assert "url" not in config
    assert config["service"] == {"name": "accel-operator-webhook", "namespace": "accel-system", "port": 443, "path": ""}
    assert config["caBundle"]
    assert not key_dir.exists(), "the self-signed private key stays on disk after kopf loaded it"


@pytest.mark.parametrize("host", [None, "127.0.0.1"])
def test_a_self_signed_key_is_removed_once_the_server_serves_and_when_it_stops(host: str | None) -> None:
    import asyncio

    where: dict[str, Any] = {"webhook_host": host} if host else {}
    server = admission.webhook_server(OperatorSettings(webhook_port=0, webhook_address="127.0.0.1", **where))
    assert isinstance(server, admission.UrlWebhookServer)
    key_dir = server.key_dir
    assert key_dir is not None and key_dir.is_dir()

    async def serve_once() -> bool:
        async def fn(*_: Any, **__: Any) -> Any:
            raise AssertionError("no request is made")

        configs = server(fn)
        try:
            await anext(configs)
            # kopf goes on checking its certificate files for a renewal: with the key gone it must
            # not fail (it re-reads them every file_check_interval).
            server.file_check_interval = 0.01
            follow = asyncio.ensure_future(anext(configs))
            await asyncio.sleep(0.1)
            assert not follow.done(), follow.exception() if follow.done() else None
            follow.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follow
            return key_dir.exists()
        finally:
            await cast(AsyncGenerator[Any, None], configs).aclose()

    assert asyncio.run(serve_once()) is False
    # A server stopped before it served removes its key too.
    unused = admission.webhook_server(OperatorSettings(webhook_port=0, webhook_address="127.0.0.1", **where))
    assert isinstance(unused, admission.UrlWebhookServer) and unused.key_dir is not None
    left = unused.key_dir
    unused.forget_key()
    assert not left.exists()


def test_a_refusal_is_not_logged_as_an_error() -> None:
    import logging

    def record(msg: str, level: int = logging.ERROR) -> logging.LogRecord:
        rec = logging.LogRecord("kopf.objects", level, __file__, 1, msg, None, None)
        assert admission.REFUSALS.filter(rec)
        return rec

    refused = record("Webhook 'policy' failed permanently: spec.team: must be 'research' ...")
    assert (refused.levelno, refused.levelname) == (logging.INFO, "INFO")
    other = record("Webhook 'team' failed with an exception. Will retry.")
    assert (other.levelno, other.levelname) == (logging.ERROR, "ERROR")


def test_a_shared_certificate_serves_only_its_names_its_key_and_before_the_renewal_window() -> None:
    names = tls.sans_for("", "accel-operator-webhook", "accel-system")
    pair = tls.self_signed_pem(names)
    assert tls.serves(pair, names)
    assert tls.serves(pair, names[:1])
    assert not tls.serves(pair, names, renew_days=366)  # valid a year: inside the window
    assert not tls.serves(pair, [*names, "127.0.0.1"])  # a name it lacks
    other = tls.self_signed_pem(names)
    assert not tls.serves(tls.TlsPair(pair.cert_pem, other.key_pem), names)  # another's key
    assert not tls.serves(tls.TlsPair(b"not a certificate", pair.key_pem), names)
    assert not tls.serves(tls.TlsPair(pair.cert_pem, b"not a key"), names)


def test_without_an_api_client_the_tls_secret_setting_falls_back_to_a_certificate_per_process() -> None:
    settings = OperatorSettings(webhook_port=9443, webhook_tls_secret="accel-operator-webhook-cert")
    first, second = admission.webhook_server(settings), admission.webhook_server(settings)
    assert first.cadata and second.cadata and first.cadata != second.cadata
    first.forget_key()
    second.forget_key()


def test_the_tls_secret_setting_is_a_secret_name() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="webhook_tls_secret"):
        OperatorSettings(webhook_tls_secret="Not/A Name")
