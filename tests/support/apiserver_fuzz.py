"""Hostile documents through the real API server, the operator's admission webhooks and the
running operator: the engine behind ``bench/fuzz_apiserver.py`` and the cluster test
``tests/cluster/test_fuzz_apiserver.py``.

The documents are ``tests/support/hostile.py``'s (the same generator as ``bench/fuzz_cli.py``).
Each one is sent the way a client such as ``kubectl create`` sends it: the YAML is read on the
client (the project's bounded loader, with the integer-digit rule lifted so that huge integers
reach the server), every mapping naming an accel.dev kind is given a unique name (and the run's
namespace) and sent as JSON with ``create``. What the client cannot send (YAML it cannot read,
a document that is not an accel.dev object, NaN or infinity, which JSON cannot carry) is counted
as refused by the client, as kubectl would refuse it.

The server's answer is sorted: accepted (201), refused by the CRD schema or its CEL rules (422
with ``details.causes``), refused by the webhook (422 ``admission webhook ... denied the
request``), refused by the decoder (400) or for its size (413), a server error (5xx), or no
answer in time. Every refusal must name a field.

While the documents go in, :class:`Tracker` lists the accepted objects: every accepted job must
get a ``status.phase`` within ``phase_bound`` seconds; it is deleted a few seconds after (pools
and policies a few seconds after they are created), so the operator works on a bounded set and
deletion (kopf's finalizers) is exercised too. :class:`OperatorProcess` runs ``python -m
accel_operator`` (webhooks on, watching the run's namespace) in a subprocess, restarts it if it
exits (a crash, as a Deployment would restart it) and reads its peak RSS; its log must hold no
traceback and no error line. The API server's log is read for webhook calls that failed open.
"""

from __future__ import annotations

import base64
import collections
import datetime as dt
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from accel_api import loader, registry
from accel_api import vocabulary as v
from accel_api.pool import AcceleratorPoolSpec
from accel_localcluster import Cluster, kubeapi, nodes, preempt
from tests.support import hostile, webhooks
from tests.support.cluster import free_port

NAME_PREFIX = "fz"
REQUEST_TIMEOUT_S = 30
NAMESPACE_TEAM = "research"  # the examples' jobs name research (allowed) or serving (refused)

# A line of a refusal that names a field: ``spec.x: ...``, ``metadata.name: ...``, ``spec.env[0].name: ...``
# (and the webhook's "... and N more").
FIELD_LINE = re.compile(r"^(?:\[)?(?:metadata|spec|status|apiVersion|kind)(?:[.\[][^\s:]*)?:|^\.\.\. and \d+ more$")


# The schema validator's wording for a fractional number in an integer field: the field is in the
# text ("Checked value must be of type integer (default format) in spec.workload.tokens"), not in
# the cause's ``field``.
_IN_FIELD = re.compile(r" in (?:spec|metadata)\.[A-Za-z][^\s]*$")


class _SendLoader(loader.BoundedLoader):
    """The CLI's bounded loader (aliases, depth, tags) without its own integer-digit rule: a huge
    integer goes to the server, which must refuse it itself."""

    def construct_bounded_int(self, node: Any) -> Any:
        return self._scalar(node, "integer", yaml.SafeLoader.construct_yaml_int)


_SendLoader.add_constructor("tag:yaml.org,2002:int", _SendLoader.construct_bounded_int)


def _read(text: str) -> list[Any]:
    if len(text) > loader.MAX_TEXT_CHARS:
        raise yaml.YAMLError("too long")
    reader = _SendLoader(text)
    try:
        out = []
        while reader.check_data():  # type: ignore[no-untyped-call]
            out.append(reader.get_data())
        return out
    finally:
        reader.dispose()


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, set | frozenset):
        return sorted(map(str, value))
    raise TypeError(type(value).__name__)


@dataclass(frozen=True)
class Sendable:
    source: str  # the generator's name of the document
    kind: registry.Kind
    namespace: str
    name: str
    body: dict[str, Any]
    size: int  # bytes of JSON


def prepare(source: str, text: str, index: int, namespace: str) -> tuple[list[Sendable], list[str]]:
    """What a client would send for one YAML stream, and why it would send the rest nowhere."""
    try:
        docs = [d for d in _read(text) if d is not None]
    except (yaml.YAMLError, RecursionError, ValueError):
        return [], ["yaml"]
    out: list[Sendable] = []
    refused: list[str] = []
    for j, doc in enumerate(docs):
        kind_name = doc.get("kind") if isinstance(doc, dict) else None
        kind = registry.BY_KIND.get(kind_name) if isinstance(kind_name, str) else None
        if not isinstance(doc, dict) or kind is None or doc.get("apiVersion") != v.API_VERSION:
            refused.append("not an accel.dev object")
            continue
        name = f"{NAME_PREFIX}{index:05d}-{j}" if kind.namespaced else f"{NAME_PREFIX}-{namespace}-{index:05d}-{j}"
        meta = doc.get("metadata")
        if isinstance(meta, dict):
            meta = {**meta, "name": name}
            meta.pop("generateName", None)
            if kind.namespaced:
                meta["namespace"] = namespace
            else:
                meta.pop("namespace", None)
            doc = {**doc, "metadata": meta}  # noqa: PLW2901 (the document as sent)
        try:
            encoded = json.dumps(doc, allow_nan=False, default=_json_default)
        except (ValueError, TypeError, RecursionError):
            refused.append("not JSON (NaN, infinity, a huge integer or a key JSON cannot carry)")
            continue
        out.append(Sendable(source, kind, namespace, name, json.loads(encoded), len(encoded)))
    return out, refused


# --- sending -------------------------------------------------------------------------------------


@dataclass
class Answer:
    sendable: Sendable
    outcome: str  # accepted | schema | webhook | decode | too-large | server-error | no-answer | other
    status: int | None
    message: str = ""
    names_field: bool = True
    seconds: float = 0.0


def _names_field(outcome: str, body: dict[str, Any], message: str) -> bool:
    if outcome == "webhook":
        lines = message.split("denied the request:", 1)[-1].strip().splitlines()
        return bool(lines) and all(FIELD_LINE.match(line.strip()) for line in lines)
    causes = (body.get("details") or {}).get("causes") or []
    if causes:  # the API server's validation: one cause per field ("<nil>" for a rule it skipped)
        return any(c.get("field") not in (None, "", "<nil>") or _IN_FIELD.search(c.get("message", "")) for c in causes)
    # A decoder's refusal: the field is named in the text (``.metadata.name``, ``ObjectMeta.labels``).
    return bool(re.search(r"(?:metadata|spec|Meta)\.[A-Za-z]|field \"?[a-z]", message))


def send(custom: client.CustomObjectsApi, item: Sendable) -> Answer:
    started = time.monotonic()
    try:
        if item.kind.namespaced:
            custom.create_namespaced_custom_object(
                v.GROUP, v.VERSION, item.namespace, item.kind.plural, item.body, _request_timeout=REQUEST_TIMEOUT_S
            )
        else:
            custom.create_cluster_custom_object(
                v.GROUP, v.VERSION, item.kind.plural, item.body, _request_timeout=REQUEST_TIMEOUT_S
            )
    except client.ApiException as exc:
        seconds = time.monotonic() - started
        try:
            body = json.loads(exc.body or "{}")
        except ValueError:
            body = {}
        message = str(body.get("message") or exc.reason or "")
        status = exc.status
        if status == 422 and "admission webhook" in message:
            outcome = "webhook"
        elif status == 422:
            outcome = "schema"
        elif status == 400:
            outcome = "decode"
        elif status == 413:
            outcome = "too-large"
        elif status is not None and status >= 500:
            outcome = "server-error"
        else:
            outcome = "other"
        names = outcome == "server-error" or _names_field(outcome, body, message)
        return Answer(item, outcome, status, message, names, seconds)
    except Exception as exc:  # urllib3 timeouts and connection errors: no answer
        return Answer(item, "no-answer", None, f"{type(exc).__name__}: {str(exc)[:200]}", True)
    return Answer(item, "accepted", 201, seconds=time.monotonic() - started)


# --- following what was accepted ------------------------------------------------------------------


@dataclass
class Tracked:
    item: Sendable
    accepted_at: float
    phase_at: float | None = None
    phase: str | None = None
    deleted_at: float | None = None
    seen: set[str] = field(default_factory=set)  # every phase it was listed in


class Tracker:
    """Lists the accepted objects every ``interval`` seconds: the time to a job's first phase,
    the largest status, jobs without a phase past ``phase_bound``; deletes each after ``dwell``."""

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        *,
        phase_bound: float,
        dwell: float = 5.0,
        interval: float = 1.0,
    ) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.namespace, self.phase_bound, self.dwell, self.interval = namespace, phase_bound, dwell, interval
        self.objects: dict[tuple[str, str], Tracked] = {}
        self.lock = threading.Lock()
        self.largest_status = 0
        self.largest_status_of = ""
        self.largest_object = 0
        self.stuck: list[str] = []  # jobs without a phase past the bound
        self.to_phase: list[float] = []
        self.phases: collections.Counter[str] = collections.Counter()
        self.failed_messages: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tracker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def add(self, item: Sendable) -> None:
        with self.lock:
            self.objects[(item.kind.plural, item.name)] = Tracked(item, time.monotonic())

    def pending(self) -> int:
        with self.lock:
            return sum(1 for t in self.objects.values() if t.deleted_at is None)

    def _listed(self) -> dict[tuple[str, str], dict[str, Any]]:
        out: dict[tuple[str, str], dict[str, Any]] = {}
        jobs = self.custom.list_namespaced_custom_object(v.GROUP, v.VERSION, self.namespace, registry.JOB.plural)
        for obj in jobs.get("items", []):
            out[(registry.JOB.plural, obj["metadata"]["name"])] = obj
        for kind in (registry.POOL, registry.POLICY):
            for obj in self.custom.list_cluster_custom_object(v.GROUP, v.VERSION, kind.plural).get("items", []):
                if obj["metadata"]["name"].startswith(f"{NAME_PREFIX}-{self.namespace}-"):
                    out[(kind.plural, obj["metadata"]["name"])] = obj
        return out

    def tick(self) -> None:
        listed = self._listed()
        now = time.monotonic()
        with self.lock:
            items = list(self.objects.items())
        for key, t in items:
            if t.deleted_at is not None:
                continue
            obj = listed.get(key)
            if obj is None:
                if now - t.accepted_at > 5:  # created but not listed: gone (deleted by someone else)
                    t.deleted_at = now
                continue
            status = obj.get("status") or {}
            size = len(json.dumps(status))
            if size > self.largest_status:
                self.largest_status, self.largest_status_of = size, f"{t.item.kind.kind} {t.item.source}"
            self.largest_object = max(self.largest_object, len(json.dumps(obj)))
            if t.item.kind is registry.JOB:
                phase = status.get("phase")
                if isinstance(phase, str):
                    t.seen.add(phase)
                if phase and t.phase_at is None:
                    t.phase_at, t.phase = now, phase
                    self.to_phase.append(now - t.accepted_at)
                    self.phases[phase] += 1
                    if phase == "Failed" and len(self.failed_messages) < 20:
                        self.failed_messages.append(f"{t.item.source}: {str(status.get('message'))[:200]}")
                due = t.phase_at is not None and now - t.phase_at >= self.dwell
                if t.phase_at is None and now - t.accepted_at > self.phase_bound:
                    self.stuck.append(f"{t.item.source} ({t.item.name}): no phase after {self.phase_bound:.0f}s")
                    due = True
            else:
                due = now - t.accepted_at >= self.dwell
            if due:
                self._delete(t)
                t.deleted_at = now

    def _delete(self, t: Tracked) -> None:
        with kubeapi.ignoring(404):
            if t.item.kind.namespaced:
                self.custom.delete_namespaced_custom_object(
                    v.GROUP, v.VERSION, self.namespace, t.item.kind.plural, t.item.name
                )
            else:
                self.custom.delete_cluster_custom_object(v.GROUP, v.VERSION, t.item.kind.plural, t.item.name)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.tick()
            except client.ApiException:
                continue  # the next tick lists again

    def drain(self, timeout: float) -> None:
        """Follow until every accepted object is judged and deleted (or ``timeout``)."""
        end = time.monotonic() + timeout
        while self.pending() and time.monotonic() < end:
            time.sleep(self.interval)
        self._stop.set()
        self._thread.join(10)
        with self.lock:
            for t in self.objects.values():
                if t.deleted_at is None and t.item.kind is registry.JOB and t.phase_at is None:
                    self.stuck.append(f"{t.item.source} ({t.item.name}): no phase by the end of the run")

    def admitted(self) -> int:
        """Jobs listed as Admitted or later: the operator made a workload from their spec."""
        later = {"Admitted", "Running", "Preempted", "Succeeded"}
        with self.lock:
            return sum(1 for t in self.objects.values() if t.seen & later)

    def lingering(self, timeout: float) -> list[str]:
        """Deleted jobs still present after ``timeout`` (a finalizer the operator never removed)."""
        end = time.monotonic() + timeout
        left: list[str] = []
        while time.monotonic() < end:
            jobs = self.custom.list_namespaced_custom_object(v.GROUP, v.VERSION, self.namespace, registry.JOB.plural)
            left = [
                o["metadata"]["name"] for o in jobs.get("items", []) if o["metadata"]["name"].startswith(NAME_PREFIX)
            ]
            if not left:
                return []
            time.sleep(1)
        return left


# --- the operator in a subprocess ----------------------------------------------------------------


class OperatorProcess:
    """``python -m accel_operator`` with its webhooks, watching one namespace; restarted if it
    exits (each exit counted as a crash); its peak RSS kept across restarts."""

    def __init__(self, kubeconfig: Path, namespace: str, log: Path, *, webhook_port: int) -> None:
        self.env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "ACCEL_OPERATOR_NAMESPACES": json.dumps([namespace]),
            "ACCEL_OPERATOR_LIVENESS_PORT": "0",
            "ACCEL_OPERATOR_METRICS_PORT": "0",
            "ACCEL_OPERATOR_RESYNC_SECONDS": "10",
            "ACCEL_OPERATOR_WEBHOOK_PORT": str(webhook_port),
            "ACCEL_OPERATOR_WEBHOOK_HOST": "127.0.0.1",
            "ACCEL_OPERATOR_WEBHOOK_ADDRESS": "127.0.0.1",
        }
        self.log = log
        self.crashes: list[int] = []
        self.peak_rss_kib = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "accel_operator"], env=self.env, stdout=out, stderr=subprocess.STDOUT
            )

    def check(self) -> None:
        """Read the peak RSS; restart the process if it has exited."""
        with self._lock:
            assert self.proc is not None
            self._read_rss()
            code = self.proc.poll()
            if code is not None:
                self.crashes.append(code)
                self.start()

    def _read_rss(self) -> None:
        assert self.proc is not None
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    self.peak_rss_kib = max(self.peak_rss_kib, int(line.split()[1]))
        except OSError:
            pass

    def stop(self) -> None:
        with self._lock:
            assert self.proc is not None
            self._read_rss()
            if self.proc.poll() is None:
                self.proc.terminate()
                self.proc.wait(timeout=60)
            elif self.proc.returncode not in (0, None):
                self.crashes.append(self.proc.returncode)

    def errors(self) -> list[str]:
        """Lines of the log reporting an error or a traceback (refusals are logged at INFO)."""
        text = self.log.read_text(errors="replace")
        retried = re.compile(r"Request attempt #\d+/\d+ failed; will retry")
        return [
            line
            for line in text.splitlines()
            if re.search(r"\b(ERROR|CRITICAL)\b|Traceback", line) and not retried.search(line)
        ]


@dataclass
class Capacity:
    """The example pools, unmutated, with simulated nodes: accepted jobs get admitted and their
    workloads (hostile values and all) created."""

    pools: list[str] = field(default_factory=list)

    def up(self, api: client.ApiClient, nodes_per_pool: int) -> None:
        core = client.CoreV1Api(api)
        for text in hostile.EXAMPLES.values():
            for doc in yaml.safe_load_all(text):
                if isinstance(doc, dict) and doc.get("kind") == "AcceleratorPool":
                    kubeapi.apply(api, doc)
                    name = doc["metadata"]["name"]
                    self.pools.append(name)
                    spec = AcceleratorPoolSpec.model_validate(doc["spec"])
                    nodes.ensure_nodes(core, nodes.node_manifests(name, spec, nodes_per_pool))

    def down(self, api: client.ApiClient) -> None:
        core = client.CoreV1Api(api)
        custom = client.CustomObjectsApi(api)
        for name in self.pools:
            for n in core.list_node(label_selector=f"{v.LABEL_POOL}={name}").items:
                preempt.delete_node(core, n.metadata.name)
            with kubeapi.ignoring(404):
                custom.delete_cluster_custom_object(v.GROUP, v.VERSION, registry.POOL.plural, name)


# --- one run ---------------------------------------------------------------------------------------


@dataclass
class Report:
    documents: int = 0
    objects: int = 0  # sendable objects (a stream may hold several)
    client_refused: collections.Counter[str] = field(default_factory=collections.Counter)
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    by_kind: collections.Counter[str] = field(default_factory=collections.Counter)  # accepted per kind
    statuses: collections.Counter[int] = field(default_factory=collections.Counter)
    unnamed: list[str] = field(default_factory=list)  # schema or webhook refusals that name no field
    decoder_unnamed: list[str] = field(default_factory=list)  # the API server's decoder, its own words
    server_errors: list[str] = field(default_factory=list)
    no_answer: list[str] = field(default_factory=list)
    samples: dict[str, list[str]] = field(default_factory=lambda: collections.defaultdict(list))
    corpus: dict[str, str] = field(default_factory=dict)  # the fixed corpus: document -> the first answer
    failed_open: list[str] = field(default_factory=list)  # API server: webhook calls that failed open
    operator_errors: list[str] = field(default_factory=list)
    crashes: list[int] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    lingering: list[str] = field(default_factory=list)
    phases: collections.Counter[str] = field(default_factory=collections.Counter)
    failed_messages: list[str] = field(default_factory=list)
    to_phase: list[float] = field(default_factory=list)
    admitted: int = 0
    slowest_answer: float = 0.0
    largest_status: int = 0
    largest_status_of: str = ""
    largest_object: int = 0
    peak_rss_mib: float = 0.0
    seconds: float = 0.0

    def problems(self) -> list[str]:
        """Every broken acceptance rule, one line each; empty: the run passed."""
        out = [f"operator log: {line[:300]}" for line in self.operator_errors[:10]]
        out += [f"operator exited with {code} (a crash)" for code in self.crashes]
        out += [f"refusal without a field: {m[:300]}" for m in self.unnamed[:10]]
        out += [f"server error: {m[:300]}" for m in self.server_errors[:10]]
        out += [f"no answer: {m[:300]}" for m in self.no_answer[:10]]
        out += [f"webhook failed open: {m[:300]}" for m in self.failed_open[:10]]
        out += [f"stuck without status: {m}" for m in self.stuck[:10]]
        out += [f"never deleted: {m}" for m in self.lingering[:10]]
        return out

    def figures(self) -> list[str]:
        refused = {k: n for k, n in self.outcomes.items() if k != "accepted"}
        q = sorted(self.to_phase)

        def p(f: float) -> float:
            return q[min(len(q) - 1, int(f * len(q)))] if q else 0.0

        return [
            f"documents: {self.documents}; objects sent: {self.objects}; refused by the client (as kubectl "
            f"would): {sum(self.client_refused.values())} {dict(self.client_refused)}",
            f"accepted: {self.outcomes['accepted']} {dict(self.by_kind)}; refused: {sum(refused.values())} "
            f"(CRD schema/CEL {self.outcomes['schema']}, webhook {self.outcomes['webhook']}, decoder "
            f"{self.outcomes['decode']}, too large {self.outcomes['too-large']}, other {self.outcomes['other']})",
            f"HTTP statuses: {dict(sorted(self.statuses.items()))}; server errors (5xx): {len(self.server_errors)}; "
            f"no answer in {REQUEST_TIMEOUT_S}s: {len(self.no_answer)}; webhook calls failed open: "
            f"{len(self.failed_open)}; slowest answer {self.slowest_answer:.2f}s",
            f"refusals without a field: {len(self.unnamed)} (CRD schema/CEL and webhook); the API server's JSON "
            f"decoder, in its own words: {len(self.decoder_unnamed)}",
            f"jobs' first phase: {dict(self.phases)}; seconds to it p50 {p(0.5):.1f}, p99 {p(0.99):.1f}, "
            f"max {max(q, default=0):.1f}; admitted (a workload made from the spec): {self.admitted}; stuck "
            f"without status: {len(self.stuck)}; never deleted: {len(self.lingering)}",
            f"operator: error/traceback lines {len(self.operator_errors)}, crashes {len(self.crashes)}, "
            f"peak RSS {self.peak_rss_mib:.0f} MiB",
            f"largest status written: {self.largest_status} bytes ({self.largest_status_of}); largest object "
            f"{self.largest_object} bytes",
            f"wall time: {self.seconds:.0f}s",
        ]


def _apiserver_failed_open(cluster: Cluster, offset: int) -> list[str]:
    path = cluster.log("kube-apiserver")
    try:
        with path.open("rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if "failing open" in line and v.GROUP in line]


def run(
    api: client.ApiClient,
    cluster: Cluster,
    namespace: str,
    documents: Iterable[tuple[str, str]],
    *,
    log: Path,
    concurrency: int = 4,
    phase_bound: float = 60.0,
    nodes_per_pool: int = 2,
    progress: Any = None,
) -> Report:
    """Send ``documents`` (name, YAML text) with the operator running; judge what happened."""
    report = Report()
    started = time.monotonic()
    # Python's HTTP client gives up on an answer with more than 100 headers; the API server sends
    # one Warning header per unknown field (2,000 for a document with 2,000 unknown keys).
    http.client._MAXHEADERS = max(http.client._MAXHEADERS, 100_000)  # type: ignore[attr-defined]
    core = client.CoreV1Api(api)
    core.patch_namespace(namespace, {"metadata": {"labels": {v.LABEL_NAMESPACE_TEAM: NAMESPACE_TEAM}}})
    try:
        apiserver_offset = cluster.log("kube-apiserver").stat().st_size
    except OSError:
        apiserver_offset = 0
    capacity = Capacity()
    operator = OperatorProcess(cluster.kubeconfig, namespace, log, webhook_port=free_port())
    tracker = Tracker(api, namespace, phase_bound=phase_bound)
    custom = client.CustomObjectsApi(api)
    lock = threading.Lock()
    try:
        capacity.up(api, nodes_per_pool)
        operator.start()
        _wait(lambda: webhooks.configured(api), 90, "the operator's webhook configuration", operator)
        _wait(lambda: _webhook_answers(custom, namespace), 90, "the webhook answering", operator)
        tracker.start()

        def record(answer: Answer) -> None:
            with lock:
                item = answer.sendable
                report.outcomes[answer.outcome] += 1
                if answer.status is not None:
                    report.statuses[answer.status] += 1
                report.slowest_answer = max(report.slowest_answer, answer.seconds)
                line = f"{item.source} ({item.kind.kind}): {answer.status} {answer.message[:400]}"
                if not item.source.startswith("mutation-"):
                    report.corpus.setdefault(item.source, f"{answer.outcome}: {answer.message[:1000]}")
                if answer.outcome == "accepted":
                    report.by_kind[item.kind.kind] += 1
                    tracker.add(item)
                elif len(report.samples[answer.outcome]) < 5:
                    report.samples[answer.outcome].append(line)
                if not answer.names_field:
                    # The API server's own JSON decoder (a number beyond float64, say) words its
                    # refusals itself; they are counted apart from the schema's and the webhook's.
                    (report.decoder_unnamed if answer.outcome == "decode" else report.unnamed).append(line)
                if answer.outcome == "server-error":
                    report.server_errors.append(line)
                if answer.outcome == "no-answer":
                    report.no_answer.append(line)
                    tracker.add(item)  # it may have been created: followed (and deleted) all the same

        in_flight = threading.BoundedSemaphore(concurrency * 2)

        def done(fut: Future[Answer]) -> None:
            try:
                record(fut.result())
            finally:
                in_flight.release()

        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            for index, (source, text) in enumerate(documents):
                report.documents += 1
                items, refused = prepare(source, text, index, namespace)
                report.client_refused.update(refused)
                for item in items:
                    report.objects += 1
                    in_flight.acquire()
                    fut: Future[Answer] = pool.submit(send, custom, item)
                    fut.add_done_callback(done)
                if index % 50 == 0:
                    operator.check()
                    if progress is not None:
                        progress(index, report)
        tracker.drain(timeout=phase_bound + 60)
        report.lingering = tracker.lingering(timeout=60)
        operator.check()
    finally:
        tracker._stop.set()
        if operator.proc is not None:
            operator.stop()
        webhooks.remove(api)
        capacity.down(api)
    report.crashes = operator.crashes
    report.peak_rss_mib = operator.peak_rss_kib / 1024
    report.operator_errors = operator.errors()
    report.failed_open = _apiserver_failed_open(cluster, apiserver_offset)
    report.stuck = tracker.stuck
    report.phases = tracker.phases
    report.failed_messages = tracker.failed_messages
    report.to_phase = tracker.to_phase
    report.admitted = tracker.admitted()
    report.largest_status, report.largest_status_of = tracker.largest_status, tracker.largest_status_of
    report.largest_object = tracker.largest_object
    report.seconds = time.monotonic() - started
    return report


def _webhook_answers(custom: client.CustomObjectsApi, namespace: str) -> bool:
    """Whether the webhook judges: a job of another namespace's team is refused by it (not let in
    by failing open while the operator's indexes fill)."""
    doc = yaml.safe_load(hostile.EXAMPLES["01-finetune-single-gpu.yaml"])
    doc["metadata"] = {"name": "fz-probe", "namespace": namespace}
    doc["spec"]["team"] = "someone-else"
    try:
        custom.create_namespaced_custom_object(v.GROUP, v.VERSION, namespace, registry.JOB.plural, doc)
    except client.ApiException as exc:
        return exc.status == 422 and "admission webhook" in str(exc.body)
    custom.delete_namespaced_custom_object(v.GROUP, v.VERSION, namespace, registry.JOB.plural, "fz-probe")
    return False


def _wait(check: Any, timeout: float, what: str, operator: OperatorProcess) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        operator.check()
        if check():
            return
        time.sleep(0.5)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}:\n{operator.log.read_text()[-3000:]}")


def documents(seed: int, count: int) -> Iterator[tuple[str, str]]:
    """The documents of ``bench/fuzz_cli.py`` for ``seed`` and ``count``."""
    import random

    return hostile.random_documents(random.Random(seed), count)
