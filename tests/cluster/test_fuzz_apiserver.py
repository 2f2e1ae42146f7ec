"""Hostile documents through the real API server and the operator's webhooks, with the operator
reconciling: the CI-size run of ``bench/fuzz_apiserver.py`` (the fixed corpus and mutations of
the examples, seed 1; the engine is ``tests/support/apiserver_fuzz.py``)."""

from __future__ import annotations

from pathlib import Path

from kubernetes import client

from accel_localcluster import Cluster
from tests.support import apiserver_fuzz

DOCUMENTS = 200


def test_hostile_documents_through_the_api_server_and_the_webhook_break_nothing(
    api: client.ApiClient, cluster: Cluster, crds: list[str], namespace: str, tmp_path: Path
) -> None:
    report = apiserver_fuzz.run(
        api,
        cluster,
        namespace,
        apiserver_fuzz.documents(seed=1, count=DOCUMENTS),
        log=tmp_path / "operator.log",
        concurrency=4,
        phase_bound=60,
    )
    print("\n".join(report.figures()))
    # The run exercised every path: the schema, the webhook and the operator each had work.
    assert report.documents == DOCUMENTS
    assert report.outcomes["schema"] > 0, report.figures()
    assert report.outcomes["webhook"] > 0, report.figures()
    assert report.by_kind["AcceleratorJob"] > 0 and report.phases, report.figures()
    # 0 operator tracebacks, errors or crashes; every refusal names a field; no 5xx, no request
    # without an answer, no webhook call failing open; every accepted job gets a phase in 60 s.
    assert not report.problems(), "\n".join(report.problems() + report.figures())
    assert report.peak_rss_mib < 512, report.figures()  # the Deployment's memory limit
    # The rules the CRD carries as CEL on the field are reported with the field and the reason.
    for doc, expected in (
        ("deadline-0s", 'spec.deadline: Invalid value: "0s": must be more than 0s'),
        ("checkpoint-traversal", 'spec.checkpoint.uri: Invalid value: "pvc://claim/../../etc": must stay inside'),
        ("env-ld-preload", 'spec.env[0].name: Invalid value: "LD_PRELOAD": is reserved for the operator'),
    ):
        assert report.corpus[doc].startswith("schema: ") and expected in report.corpus[doc], report.corpus[doc]
