"""``accelctl validate`` and the CRDs agree: every document of a corpus of more than 500 (valid
examples and their hostile or careless mutations, ``tests/support/validate_corpus.py``) is
accepted by both or refused by both, the API server judging by a dry-run create with the CRD
schema and CEL alone (no admission webhook). What the two cannot agree on by design is listed
in the corpus module; the immutable-field updates, which validate cannot see, are checked
against the API server alone."""

import time
from pathlib import Path

from kubernetes import client

from tests.support import differential, validate_corpus, webhooks


def test_validate_and_the_api_server_agree_on_every_document(
    api: client.ApiClient, crds: list[str], namespace: str, tmp_path: Path
) -> None:
    # Only the CRDs decide: no webhook of ours may be registered (another test's operator may
    # have left its configuration behind).
    webhooks.remove(api)
    assert not webhooks.configured(api)
    started = time.monotonic()
    docs = validate_corpus.corpus()
    report = differential.compare(api, docs, namespace, tmp_path)
    print("\n".join([*report.figures(), f"wall time: {time.monotonic() - started:.0f}s"]))
    assert report.documents >= 500
    assert all(report.per_kind[kind] > 0 for kind in validate_corpus.FULL), report.per_kind
    # Both sides must accept some and refuse some of every kind, or a judge is not judging.
    for kind in validate_corpus.FULL:
        assert report.table[(kind, "accept", "accept")] > 0, kind
        assert report.table[(kind, "refuse", "refuse")] > 0, kind
    assert not report.disagreements, "\n".join([*report.figures(), *report.disagreements[:60]])


def test_the_api_server_refuses_a_change_of_an_immutable_field(
    api: client.ApiClient, crds: list[str], namespace: str
) -> None:
    webhooks.remove(api)
    for update in validate_corpus.updates():
        verdict = differential.dry_run_update(api, update, namespace)
        assert verdict.accepted is not update.immutable_changed, (update.id, verdict.message)
        if update.immutable_changed:
            assert "is immutable" in verdict.message, verdict.message
