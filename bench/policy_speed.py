"""Policy evaluation speed: what the reconciler's check adds to every decision of a waiting job.

The reconciler evaluates every waiting job against every AcceleratorPolicy on each decision
(``reconcile.policy_gate``), and folds the policy and namespace indexes once per pass
(``reconcile.policy_inputs.fold``). Prints the median and p95 of ``policy.evaluate`` for one
job against 1, 10 and 100 policies of realistic size (8 budgets, 8 pool grants, a device cap,
8 reserved env names each) and against 10 policies of the largest size the CRD admits (256
budgets and 256 grants each), ``policy.restrict`` (the planner's candidates) over 50 pools, and
``fold`` of 10 policies and 1,000 namespaces. Timings on a shared machine are noisy: compare medians.

Run: ``PYTHONPATH=operator python bench/policy_speed.py [ITERATIONS]``
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import yaml

from accel_api.job import AcceleratorJobSpec
from accel_api.policy import AcceleratorPolicy
from accel_api.pool import AcceleratorPoolSpec
from accel_localcluster.control_plane import REPO
from accel_operator.planning import policy
from accel_operator.planning.candidates import PoolOffer
from accel_operator.reconcile.common import policy_inputs


def _policy(i: int, items: int) -> AcceleratorPolicy:
    teams = [f"team-{t}" for t in range(items)]
    return AcceleratorPolicy.model_validate(
        {
            "metadata": {"name": f"p{i}"},
            "spec": {
                "budgets": [{"team": t, "limitUsd": 1e6} for t in teams[: items - 1]]
                + [{"team": "research", "limitUsd": 1e6}],
                "poolAccess": [{"teams": [t, "research"], "pools": [f"pool-{k}" for k in range(8)]} for t in teams],
                "maxDevicesPerJob": 64,
                "reservedEnv": [f"SECRET_{k}_*" for k in range(8)],
            },
        }
    )


def _time(fn: Callable[[], Any], n: int) -> tuple[float, float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    out.sort()
    return statistics.median(out), out[int(0.95 * (len(out) - 1))]


def main(n: int) -> None:
    doc = next(d for d in yaml.safe_load_all((REPO / "examples" / "02-multinode-spot-training.yaml").read_text()) if d)
    job = AcceleratorJobSpec.model_validate(doc["spec"])
    spec = AcceleratorPoolSpec.model_validate({"provider": "aws", "accelerator": "h100-80gb", "devicesPerNode": 8})
    offers = [PoolOffer(name=f"pool-{k}", spec=spec) for k in range(50)]
    pools = {o.name: o.spec for o in offers}
    spent = {"research/monthly": 10.0}
    print(f"{'what':58} {'median':>10} {'p95':>10}")
    for count, items in ((1, 8), (10, 8), (100, 8), (10, 256)):
        pols = [_policy(i, items) for i in range(count)]
        med, p95 = _time(lambda pols=pols: policy.evaluate(job, "research", pols, pools=pools, spent=spent), n)
        print(
            f"{f'evaluate: {count} policies of {items} budgets and grants':58} {med * 1e6:>8.0f}µs {p95 * 1e6:>8.0f}µs"
        )
    pols = [_policy(i, 8) for i in range(10)]
    med, p95 = _time(lambda: policy.restrict(job, offers, pols), n)
    print(f"{'restrict: 50 pools, 10 policies':58} {med * 1e6:>8.0f}µs {p95 * 1e6:>8.0f}µs")
    index = {p.metadata.name: [p] for p in pols}
    teams = {f"ns-{k}": [f"team-{k % 8}"] for k in range(1000)}
    med, p95 = _time(lambda: policy_inputs.fold(index, teams), n)
    print(f"{'fold: 10 policies, 1,000 namespaces (once per pass)':58} {med * 1e6:>8.0f}µs {p95 * 1e6:>8.0f}µs")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
