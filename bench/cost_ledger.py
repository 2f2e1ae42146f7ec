"""The cost ledger's price in time and status size: prints figures, asserts nothing.

  python bench/cost_ledger.py [--jobs 5000]

1. one accrual tick for --jobs running jobs (the pure ``accrual.accrue`` per job, as the
   operator's step calls it, each job with a ledger of 3 attempts already);
2. the largest ``status.cost`` the bounds allow (16 attempts × 16 intervals), as JSON bytes;
3. ``accelctl cost report`` row building over --jobs ledgers (by team);
4. one policy's team-totals step (``teamspend.step``: 20 teams, a monthly and a daily budget
   each) over --jobs ledgers, a tenth of them deleted since the last step, and the size of the
   ``status.ledger`` it writes;
5. the durable cost rollup (``rollup.fold``): every attempt of --jobs ledgers folded (as after
   they all ended), --jobs deleted jobs' summaries, and a rollup filled to its bounds (400 days
   x 12 teams/pools, the longest names) bounded (``rollup.bound``), with its JSON size, and the
   same with its last ``ROLLUP_HOUR_DAYS`` days per hour.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import time

from accel_api.costrollup import ROLLUP_HOUR_DAYS, Bucket, CostRollup
from accel_api.enums import CapacityType
from accel_api.job import AcceleratorJobSpec, AcceleratorJobStatus, CostStatus
from accel_api.policy import AcceleratorPolicySpec
from accel_operator.accounting import accrual, costreport, ledger, rollup, teamspend
from accel_operator.adapters.kube.costs import open_json
from accel_operator.reconcile.common.snapshot import JobView

T0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
SPEC = {
    "team": "research",
    "image": "trainer:1",
    "model": {"parameters": 1.0e9},
    "workload": {"mode": "training", "tokens": 1.0e9},
}


def _ledger(attempts: int, intervals: int) -> CostStatus:
    cost: CostStatus | None = None
    for a in range(attempts):
        base = T0 + dt.timedelta(hours=a)
        for k in range(intervals):
            s = base + dt.timedelta(seconds=60 * k)
            obs = ledger.Observation(a, "pool", CapacityType.SPOT, 8, s, s + dt.timedelta(seconds=30), 2.0 + k, 6.88)
            cost = ledger.record(cost, obs)
        cost = ledger.close(cost, ledger.AttemptEnd(a, base + dt.timedelta(seconds=60 * intervals), preempted=True))
    assert cost is not None
    return cost


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=5000)
    args = parser.parse_args()
    spec = AcceleratorJobSpec.model_validate(SPEC)
    prior = _ledger(3, 4)
    status = AcceleratorJobStatus.model_validate(
        {
            "phase": "Running",
            "attempt": 3,
            "admittedTime": "2026-11-01T05:00:00Z",
            "plan": {"pool": "pool", "devices": 8, "nodes": 1, "capacityType": "spot", "costUsd": 100.0},
            "cost": prior.model_dump(by_alias=True, mode="json"),
        }
    )
    job = JobView("ns", "j", "uid", T0, 1, spec, (), status)
    price = accrual.Price(2.5, 6.88)
    jobs = [dataclasses.replace(job, name=f"j{i}", uid=f"u{i}") for i in range(args.jobs)]
    now = T0 + dt.timedelta(hours=6)
    t0 = time.perf_counter()
    out = [accrual.accrue(j, None, accrual.Tick(price, 0.0, now)) for j in jobs]
    tick = time.perf_counter() - t0
    per_job = 1e3 * tick / args.jobs
    print(f"accrual tick, {args.jobs} running jobs (3 closed attempts each): {tick:.2f} s ({per_job:.2f} ms/job)")

    big = _ledger(20, 40)
    size = len(json.dumps(big.model_dump(by_alias=True, mode="json", exclude_none=True)))
    print(f"largest status.cost (16 attempts x 16 intervals): {size / 1024:.0f} KiB as JSON")

    costs = [costreport.JobCost("ns", f"j{i}", f"team{i % 20}", c) for i, c in enumerate(out)]
    t0 = time.perf_counter()
    rows = costreport.rows(costs, costreport.By.TEAM, T0, now)
    print(f"report rows by team over {args.jobs} ledgers: {time.perf_counter() - t0:.2f} s ({len(rows)} rows)")

    budgets = [{"team": f"team{t}", "period": p, "limitUsd": 1e6} for t in range(20) for p in ("monthly", "daily")]
    policy = AcceleratorPolicySpec.model_validate({"budgets": budgets})
    live = [teamspend.LiveJob(c.name, c.team, c.cost) for c in costs]
    first = teamspend.step(policy, None, live, {j.uid for j in live}, now)
    kept = live[: len(live) - len(live) // 10]
    t0 = time.perf_counter()
    done = teamspend.step(policy, first.ledger, kept, {j.uid for j in kept}, now)
    took = time.perf_counter() - t0
    size = len(json.dumps(done.ledger.to_wire()))
    print(
        f"team totals step over {args.jobs} ledgers ({len(done.folded)} deleted, folded): {took:.2f} s; "
        f"status.ledger {size / 1024:.0f} KiB ({len(done.ledger.carried)} carried)"
    )
    _rollup_figures(costs, now)


def _rollup_figures(costs: list[costreport.JobCost], now: dt.datetime) -> None:
    stored = CostRollup()
    t0 = time.perf_counter()
    for c in costs:
        stored = rollup.fold(stored, rollup.JobId(c.name, c.namespace, c.name, c.team), c.cost.attempts)
    fold = time.perf_counter() - t0
    t0 = time.perf_counter()
    for c in costs:
        stored = rollup.fold(stored, rollup.JobId(c.name, c.namespace, c.name, c.team), [], gone=now, summary=c.cost)
    gone = time.perf_counter() - t0
    print(
        f"rollup, one fold per job: {len(costs)} jobs' attempts folded in {fold:.2f} s, {len(costs)} deletions in "
        f"{gone:.2f} s; {len(stored.buckets)} buckets, {rollup.size(stored) / 1024:.0f} KiB before bounding"
    )
    # As a step folds them now: all of a step's folds in one pass.
    t0 = time.perf_counter()
    once = rollup.fold_many(
        CostRollup(), [rollup.item(rollup.JobId(c.name, c.namespace, c.name, c.team), c.cost.attempts) for c in costs]
    )
    fold = time.perf_counter() - t0
    t0 = time.perf_counter()
    once = rollup.fold_many(
        once,
        [rollup.item(rollup.JobId(c.name, c.namespace, c.name, c.team), [], gone=now, summary=c.cost) for c in costs],
    )
    gone = time.perf_counter() - t0
    print(
        f"rollup, one pass per step (fold_many): {len(costs)} jobs' attempts folded in {fold:.2f} s, "
        f"{len(costs)} deletions in {gone:.2f} s"
    )
    # The open attempts kept beside the rollup at each tick: one per running job.
    t0 = time.perf_counter()
    entries = [
        e
        for c in costs
        for e in rollup.open_attempts(rollup.JobId(c.name, c.namespace, c.name, c.team), c.cost, (), now)
    ]
    made = time.perf_counter() - t0
    t0 = time.perf_counter()
    shards, dropped = rollup.pack(entries)
    packed = time.perf_counter() - t0
    sizes = [len(open_json(sh)) for sh in shards if sh.attempts]
    print(
        f"open attempts: {len(entries)} made in {made:.2f} s, packed in {packed:.2f} s into {len(sizes)} shard(s) "
        f"of {', '.join(f'{n / 1024:.0f}' for n in sizes)} KiB ({dropped} not kept)"
    )
    big = []
    for d in range(440):
        day = (now - dt.timedelta(days=d)).date().isoformat()
        for k in range(12):
            big.append(Bucket(day=day, team="t" * 63, pool=f"{'p' * 240}-{k}", f=[1.0] * 7))
    full = stored.model_copy(update={"buckets": big})
    t0 = time.perf_counter()
    bounded = rollup.bound(full, now)
    print(
        f"rollup bounded from {len(big)} buckets ({rollup.size(full) / 1024:.0f} KiB) in "
        f"{time.perf_counter() - t0:.2f} s: {len(bounded.buckets)} buckets, {len(bounded.jobs)} summaries, "
        f"{rollup.size(bounded) / 1024:.0f} KiB"
    )
    # The same with the last ROLLUP_HOUR_DAYS days per hour (what a busy cluster's rollup holds).
    hourly = [b for b in big if b.day < (now - dt.timedelta(days=ROLLUP_HOUR_DAYS)).date().isoformat()]
    for h in range(ROLLUP_HOUR_DAYS * 24):
        hour = (now - dt.timedelta(hours=h)).strftime("%Y-%m-%dT%H")
        for k in range(12):
            hourly.append(Bucket(day=hour, team="t" * 63, pool=f"{'p' * 240}-{k}", f=[1.0] * 7))
    full = stored.model_copy(update={"buckets": hourly})
    t0 = time.perf_counter()
    bounded = rollup.bound(full, now)
    kept_hours = sum(1 for b in bounded.buckets if len(b.day) > len("YYYY-MM-DD"))
    print(
        f"rollup with {ROLLUP_HOUR_DAYS} days of hour buckets bounded from {len(hourly)} buckets "
        f"({rollup.size(full) / 1024:.0f} KiB) in {time.perf_counter() - t0:.2f} s: {len(bounded.buckets)} buckets "
        f"({kept_hours} of them hours), {rollup.size(bounded) / 1024:.0f} KiB"
    )


if __name__ == "__main__":
    main()
