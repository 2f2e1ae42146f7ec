"""The two judges of the differential test (``tests/cluster/test_validate_differential.py``):
``accelctl validate`` run in this process on a file, and the real API server's dry-run create
of the same YAML text, with the CRDs applied and no admission webhook, so that the CRD schema
and its CEL rules alone decide.

The text goes to the API server as YAML (``Content-Type: application/yaml``), with
``dryRun=All`` (nothing is stored, so documents may share a name) and ``fieldValidation=Strict``
(kubectl's default: an unknown or duplicated field is refused rather than dropped with a
warning). A 2xx answer is an acceptance, a 400, 413 or 422 a refusal; anything else (a 5xx, a
409, no answer) is an error of the run, never counted as either.
"""

from __future__ import annotations

import collections
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

from accel_api import registry
from accel_api import vocabulary as v
from accel_operator.cli import main as cli
from tests.support import hostile
from tests.support.validate_corpus import Doc, Update

REFUSED_STATUSES = frozenset({400, 413, 422})
TIMEOUT_S = 30


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    message: str  # the refusal, clipped (empty when accepted)


class RunError(Exception):
    """An answer that is neither an acceptance nor a refusal (the run is broken, not the rules)."""


def validate(doc: Doc, folder: Path, index: int) -> Verdict:
    """``accelctl validate FILE`` on the document's text: exit 0 accepts, 2 refuses."""
    path = folder / f"doc-{index:05d}.yaml"
    path.write_text(doc.text, encoding="utf-8")
    outcome = hostile.run_cli(cli.main, ["validate", str(path)], "validate")
    path.unlink()
    if outcome.traceback is not None or outcome.status not in (0, 2):
        raise RunError(f"{doc.id}: accelctl validate ended with {outcome.status}: {outcome.traceback}")
    return Verdict(outcome.status == 0, outcome.stderr.replace(str(path), "FILE")[:600])


def _url(api: client.ApiClient, kind: registry.Kind, namespace: str, name: str | None = None) -> str:
    where = f"namespaces/{namespace}/" if kind.namespaced else ""
    tail = f"/{name}" if name else ""
    return f"{api.configuration.host}/apis/{v.GROUP}/{v.VERSION}/{where}{kind.plural}{tail}"


def _request(api: client.ApiClient, method: str, url: str, body: Any, content_type: str) -> Verdict:
    # ``body``: YAML text sent as it is, or a mapping the client encodes as JSON.
    try:
        answer = api.rest_client.request(
            method,
            url + "?dryRun=All&fieldValidation=Strict",
            headers={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            _request_timeout=TIMEOUT_S,
        )
        status, data = answer.status, answer.read()
    except client.ApiException as exc:
        status, data = exc.status, (exc.body or b"")
    if 200 <= status < 300:
        return Verdict(True, "")
    try:
        message = str(json.loads(data).get("message", ""))
    except ValueError:
        message = data.decode(errors="replace") if isinstance(data, bytes) else str(data)
    if status not in REFUSED_STATUSES:
        raise RunError(f"HTTP {status}: {message[:300]}")
    return Verdict(False, message[:600])


def dry_run_create(api: client.ApiClient, doc: Doc, namespace: str) -> Verdict:
    kind = registry.BY_KIND[doc.kind]
    try:
        return _request(api, "POST", _url(api, kind, namespace), doc.text, "application/yaml")
    except RunError as exc:
        raise RunError(f"{doc.id}: {exc}") from None


def dry_run_update(api: client.ApiClient, update: Update, namespace: str) -> Verdict:
    """``update.new`` as a replacement of ``update.old``, which is created for real first (a
    dry-run update needs a stored object) and deleted after."""
    kind = registry.BY_KIND[update.kind]
    custom = client.CustomObjectsApi(api)
    name = update.old["metadata"]["name"]
    if kind.namespaced:
        stored = custom.create_namespaced_custom_object(v.GROUP, v.VERSION, namespace, kind.plural, update.old)
    else:
        stored = custom.create_cluster_custom_object(v.GROUP, v.VERSION, kind.plural, update.old)
    try:
        new: dict[str, Any] = json.loads(json.dumps(update.new))
        new["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
        return _request(api, "PUT", _url(api, kind, namespace, name), new, "application/json")
    finally:
        if kind.namespaced:
            custom.delete_namespaced_custom_object(v.GROUP, v.VERSION, namespace, kind.plural, name)
        else:
            custom.delete_cluster_custom_object(v.GROUP, v.VERSION, kind.plural, name)


@dataclass
class Report:
    documents: int = 0
    per_kind: collections.Counter[str] = field(default_factory=collections.Counter)
    # (kind, "validate accept/refuse", "server accept/refuse") -> count
    table: collections.Counter[tuple[str, str, str]] = field(default_factory=collections.Counter)
    disagreements: list[str] = field(default_factory=list)

    def add(self, doc: Doc, mine: Verdict, server: Verdict) -> None:
        self.documents += 1
        self.per_kind[doc.kind] += 1
        word = {True: "accept", False: "refuse"}
        self.table[(doc.kind, word[mine.accepted], word[server.accepted])] += 1
        if mine.accepted != server.accepted:
            self.disagreements.append(
                f"{doc.id}: validate {word[mine.accepted]}s ({' '.join(mine.message.split())[:300]}), "
                f"the API server {word[server.accepted]}s ({' '.join(server.message.split())[:300]})"
            )

    def figures(self) -> list[str]:
        lines = [f"documents: {self.documents}; disagreements: {len(self.disagreements)}"]
        for kind in registry.KINDS:
            n = self.per_kind[kind.kind]
            cells = {(a, b): self.table[(kind.kind, a, b)] for a in ("accept", "refuse") for b in ("accept", "refuse")}
            lines.append(
                f"  {kind.kind}: {n} documents; both accept {cells[('accept', 'accept')]}, both refuse "
                f"{cells[('refuse', 'refuse')]}, only validate accepts {cells[('accept', 'refuse')]}, only the API "
                f"server accepts {cells[('refuse', 'accept')]}"
            )
        return lines


def compare(api: client.ApiClient, docs: list[Doc], namespace: str, folder: Path, *, threads: int = 4) -> Report:
    """Both judges on every document (the API server's answers fetched by ``threads`` at once)."""
    with ThreadPoolExecutor(max_workers=threads) as pool:
        answers = list(pool.map(lambda d: dry_run_create(api, d, namespace), docs))
    report = Report()
    for i, (doc, server) in enumerate(zip(docs, answers, strict=True)):
        report.add(doc, validate(doc, folder, i), server)
    return report
