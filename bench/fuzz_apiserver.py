"""Fuzz the real API server, the admission webhooks and the running operator with hostile YAML.

The same documents as ``bench/fuzz_cli.py`` (``tests/support/hostile.py``, the same seed gives
the same documents) are created through the kubernetes client in a fresh namespace of the local
control plane (``accel-cluster up`` first; ``ACCEL_CLUSTER_PORT_BASE`` picks which), with
``python -m accel_operator`` running its webhooks and reconciling, and the example pools backed
by simulated nodes so accepted jobs are admitted and get workloads. The engine is
``tests/support/apiserver_fuzz.py``.

Prints what the API server accepted and refused (the CRD schema and its CEL rules, the webhook,
the decoder), 5xx answers, requests without an answer, webhook calls that failed open, refusals
that name no field, the jobs' first phases and how long they took, jobs stuck without a status,
the operator's error lines, crashes and peak RSS, the largest status written and the wall time.
Exit status 1 when a rule is broken: an operator traceback, error or crash, a refusal without a
field, a 5xx, a request without an answer, a webhook that failed open, an accepted job without a
phase within ``--phase-bound`` seconds, a deleted job never gone.

Run: ``PYTHONPATH=operator:. python bench/fuzz_apiserver.py [--count 10000] [--seed 1] [--concurrency 4]``
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "operator"), str(ROOT)]

from kubernetes import client, config  # noqa: E402
from tests.support import apiserver_fuzz  # noqa: E402

from accel_localcluster import default_cluster, kubeapi  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000, help="documents to generate (default 10000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight (default 4)")
    parser.add_argument("--phase-bound", type=float, default=60.0, help="seconds an accepted job may wait for a phase")
    parser.add_argument("--log", type=Path, help="keep the operator's log here (default: a temporary file)")
    args = parser.parse_args()

    cluster = default_cluster()
    if not cluster.healthy():
        print("the local control plane is not running: accel-cluster up", file=sys.stderr)
        return 2
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=configuration)
    configuration.connection_pool_maxsize = args.concurrency + 4
    api = client.ApiClient(configuration)
    kubeapi.install_crds(api, ROOT / "crds")
    namespace = f"fuzz-{uuid.uuid4().hex[:6]}"
    kubeapi.ensure_namespace(api, namespace)
    started = time.monotonic()

    def progress(index: int, report: apiserver_fuzz.Report) -> None:
        if index % 1000 == 0 and index:
            print(
                f"... {index} documents, {report.objects} objects, {dict(report.outcomes)}, "
                f"{time.monotonic() - started:.0f}s",
                file=sys.stderr,
                flush=True,
            )

    log = args.log or Path(tempfile.mkdtemp(prefix="accel-fuzz-api-")) / "operator.log"
    try:
        report = apiserver_fuzz.run(
            api,
            cluster,
            namespace,
            apiserver_fuzz.documents(args.seed, args.count),
            log=log,
            concurrency=args.concurrency,
            phase_bound=args.phase_bound,
            progress=progress,
        )
    finally:
        client.CoreV1Api(api).delete_namespace(namespace, propagation_policy="Background")
    _print(report, log)
    return 1 if report.problems() else 0


def _print(report: apiserver_fuzz.Report, log: Path) -> None:
    for problem in report.problems():
        print(f"[broken] {problem}")
    for outcome, lines in sorted(report.samples.items()):
        for line in lines[:3]:
            print(f"[{outcome}] {line[:300]}")
    for line in report.failed_messages[:5]:
        print(f"[job Failed] {line}")
    print()
    for line in report.figures():
        print(line)
    print(f"operator log: {log}")


if __name__ == "__main__":
    sys.exit(main())
