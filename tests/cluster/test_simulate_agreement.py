"""The simulation and the real operator agree: a 50-job trace (three teams, a spot and an
on-demand pool, one spot disruption of a checkpointed job that then resumes, one job too large to
place) played on the local control plane by ``tests/support/simplayer.py`` (KWOK pods ended on
schedule, the node reclaimed as Karpenter does) ends with the same admissions, the same pool per
attempt, the same attempts and preemptions, and each job's ledger (``status.cost.spentUsd`` and
``lostToPreemptionUsd``) within half a cent of ``accelctl simulate``'s replay of that trace (the
``engine`` strategy). The comparison is shown to fail for a replay whose on-demand price differs
by 2%.

Why half a cent holds on a real clock: a job's cost is its pods' device-seconds times the pool's
price, and the player ends each attempt at its pods' own ``startTime`` plus the simulator's run
length, so the only differences are how late the end (or the reclaim) lands after it is due and
the whole seconds of the pods' timestamps, about a second of one or two devices; at $4 per
device-hour that is at most about $0.002 a job.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

from accel_api import vocabulary as v
from accel_localcluster import Cluster, kubeapi
from accel_operator.settings import OperatorSettings
from accel_operator.simulate import replay as sim
from accel_operator.simulate import trace
from tests.support.jobs import pool_doc
from tests.support.moto_server import CREDENTIALS, REGION, MotoServer, moto_server
from tests.support.operator import checked_operator, settings_for
from tests.support.simplayer import Player

TEAMS = ("red", "blue", "green")
CENT = 0.005  # the ledger agrees to the cent: every figure within half a cent
# Device-seconds of an attempt may differ by the pods' whole-second timestamps (up to 1 s at each
# end) and by how late the end lands after it is due (the player's poll and KWOK's stage).
SLACK_SECONDS = 3.0
SPOT_PRICE, OD_PRICE = 2.0, 4.0


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    with moto_server() as server:
        yield server


def _pools(prefix: str, od_price: float = OD_PRICE) -> list[dict[str, Any]]:
    """A spot pool, a dearer one that only the disrupted job uses (the reclaim ends every pod on
    its node; the simulator's disruption ends the job's pods: the node must hold only them) and an
    on-demand pool; preemption rates 0, so only the trace disrupts."""
    common = {"preemptionRatePerHour": 0, "restartSeconds": 5}
    return [
        pool_doc(
            f"{prefix}-{name}",
            nodes_max=nodes_max,
            capacityType="spot",
            price={"source": "static", "spotPerDeviceHour": price, "onDemandPerDeviceHour": od_price},
            **common,
        )
        for name, nodes_max, price in (("spot", 2, SPOT_PRICE), ("spot-b", 1, SPOT_PRICE * 1.1))
    ] + [
        pool_doc(f"{prefix}-od", nodes_max=3, price={"source": "static", "onDemandPerDeviceHour": od_price}, **common),
    ]


def _trace(prefix: str) -> str:
    """50 jobs over 2.4 minutes: tinyllama fine-tunes of 13 to 48 s on one H100 (1M tokens is
    26 s), a quarter checkpointed (the planner sends those to spot), a quarter kept off spot, a
    quarter on two devices; one checkpointed job of 104 s on a spot pool of its own (a full spec
    line) whose node is reclaimed 75 s in (it resumes from its 60 s checkpoint after the pool's
    5 s restart), one that fits no pool."""
    lines: list[dict[str, Any]] = []
    for i in range(48):
        line: dict[str, Any] = {
            "submit": i * 3,
            "team": TEAMS[i % 3],
            "name": f"j{i:02d}",
            "model": "tinyllama-1.1b",
            "tokens": 500_000 + (i * 37 % 10) * 150_000,
            "devices": 2 if i % 4 == 3 else 1,
        }
        if i % 4 == 0:
            line["checkpointMinutes"] = 1
        if i % 4 == 2:
            line.update(spot="never", checkpointMinutes=1)
        lines.append(line)
    compact = {"submit": 10, "team": "red", "model": "tinyllama-1.1b", "tokens": 4_000_000, "devices": 1}
    spec = trace.compact_spec(trace.TraceLine.model_validate(compact | {"checkpointMinutes": 1}))
    spec["placement"]["pools"] = [f"{prefix}-spot-b"]
    spec["checkpoint"]["uri"] = "s3://ckpt/red/resumer"
    lines.append({"submit": 10, "team": "red", "name": "resumer", "spec": spec})
    lines.append(
        {"submit": 20, "team": "blue", "name": "too-big", "model": "llama-3-70b", "tokens": 10**6, "devices": 1}
    )
    lines.append({"disrupt": 75, "job": "resumer"})
    return "\n".join(json.dumps(line) for line in lines) + "\n"


def _summary(st: dict[str, Any]) -> dict[str, Any]:
    cost = st.get("cost") or {}
    return {
        "phase": st.get("phase"),
        "admitted": bool(st.get("admittedTime")),
        "attempt": st.get("attempt", 0),
        "preemptions": st.get("preemptions", 0),
        "pools": [(a["attempt"], a["pool"]) for a in cost.get("attempts", [])],
        "spent": float(cost.get("spentUsd", 0.0)),
        "lost": float(cost.get("lostToPreemptionUsd", 0.0)),
        "deviceSeconds": float(cost.get("deviceSeconds", 0.0)),
        "devices": sum(a["devices"] for a in cost.get("attempts", [])),  # over its attempts
    }


def _differences(real: dict[str, dict[str, Any]], simulated: dict[str, dict[str, Any]]) -> list[str]:
    """Every way the two runs disagree: the jobs, what happened to each, their ledgers."""
    out = []
    if set(real) != set(simulated):
        out.append(f"jobs: {sorted(set(real) ^ set(simulated))} on one side only")
    for name in sorted(set(real) & set(simulated)):
        r, s = real[name], simulated[name]
        for key in ("phase", "admitted", "attempt", "preemptions", "pools"):
            if r[key] != s[key]:
                out.append(f"{name}: {key} {r[key]!r} on the cluster, {s[key]!r} simulated")
        for key in ("spent", "lost"):
            if abs(r[key] - s[key]) >= CENT:
                out.append(f"{name}: {key} ${r[key]:.6f} on the cluster, ${s[key]:.6f} simulated")
        if abs(r["deviceSeconds"] - s["deviceSeconds"]) > SLACK_SECONDS * max(r["devices"], 1):
            out.append(f"{name}: {r['deviceSeconds']} device-seconds on the cluster, {s['deviceSeconds']} simulated")
    return out


def _simulate(text: str, pool_docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    arrivals, disruptions = trace.read_trace_events(text, source="agreement")
    pools = trace.read_pools(yaml.safe_dump_all(pool_docs), source="pools")
    result = sim.replay(pools, arrivals, seed=0, strategy=sim.STRATEGIES["engine"], disruptions=disruptions)
    return {
        key[1]: _summary(st.model_dump(mode="json", by_alias=True, exclude_none=True))
        for key, st in result.statuses.items()
    }


def _settled(player: Player, timeout: float) -> dict[str, dict[str, Any]]:
    """The jobs' statuses once every attempt of every ledger is closed and two reads agree."""
    deadline, last = time.time() + timeout, None
    while time.time() < deadline:
        now = player._statuses()
        closed = all(
            all(a.get("end") for a in (st.get("cost") or {}).get("attempts", []))
            and (st.get("phase") == "Unschedulable" or (st.get("cost") or {}).get("attempts"))
            for st in now.values()
        )
        if closed and now == last:
            return now
        last = now if closed else None
        time.sleep(3)
    raise TimeoutError("the ledgers did not settle")


def test_a_trace_replayed_on_the_cluster_costs_what_the_simulator_says(
    api: client.ApiClient,
    core: client.CoreV1Api,
    cluster: Cluster,
    crds: list[str],
    namespace: str,
    moto: MotoServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = _trace(namespace)
    arrivals, disruptions = trace.read_trace_events(text, source="agreement")
    assert len(arrivals) == 50 and len(disruptions) == 1
    pool_docs = _pools(namespace)
    started = time.time()
    simulated = _simulate(text, pool_docs)
    sim_seconds = time.time() - started

    # The same comparison tells a replay whose on-demand price is 25% off from this one.
    assert _differences(_simulate(text, _pools(namespace, OD_PRICE * 1.25)), simulated)

    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    s3 = moto.client("s3")
    s3.create_bucket(Bucket="ckpt")  # the compact form's checkpoint URIs: s3://ckpt/<team>/<job>

    def write_checkpoint(uri: str, step: int) -> None:
        key = uri.removeprefix("s3://ckpt/") + f"/step-{step}"
        s3.put_object(Bucket="ckpt", Key=f"{key}/shard-0", Body=b"state")
        s3.put_object(Bucket="ckpt", Key=f"{key}/{v.CHECKPOINT_MARKER}", Body=b"")

    spaces = {team: f"{namespace}-{team}" for team in TEAMS}
    for ns in spaces.values():
        kubeapi.ensure_namespace(api, ns)
    pools = trace.read_pools(yaml.safe_dump_all(pool_docs), source="pools")
    player = Player(api, pools, pool_docs, arrivals, disruptions, spaces.__getitem__, write_checkpoint)
    settings = settings_for(
        namespace,
        namespaces=list(spaces.values()),
        s3_endpoint_url=moto.endpoint,
        s3_region=REGION,
        bind_timeout_seconds=60.0,
        cost_interval_seconds=2.0,
        cost_write_seconds=2.0,
        # The product defaults (the admission's status held, a new job's waiting status held), as
        # the simulator replays them.
        admitted_status_seconds=OperatorSettings().admitted_status_seconds,
        waiting_status_seconds=OperatorSettings().waiting_status_seconds,
    )
    try:
        player.setup()
        with checked_operator(settings):
            player.run(timeout=360)
            statuses = _settled(player, timeout=90)
    finally:
        player.teardown()
        for ns in spaces.values():
            core.delete_namespace(ns, propagation_policy="Background", grace_period_seconds=0)
    real = {name: _summary(st) for name, st in statuses.items()}

    assert _differences(real, simulated) == []
    # What the trace was built to exercise happened (on both sides, by the check above).
    assert real["resumer"]["preemptions"] == 1 and real["resumer"]["lost"] > 0
    assert real["too-big"]["phase"] == "Unschedulable" and not real["too-big"]["admitted"]
    assert {p for r in real.values() for _, p in r["pools"]} == {f"{namespace}-{p}" for p in ("spot", "spot-b", "od")}
    worst = max(abs(real[n]["spent"] - simulated[n]["spent"]) for n in real)
    seconds = max(abs(real[n]["deviceSeconds"] - simulated[n]["deviceSeconds"]) for n in real)
    print(
        f"agreement: {len(real)} jobs, simulated in {sim_seconds:.1f}s; worst spent difference ${worst:.6f}, "
        f"worst device-seconds difference {seconds:.2f}; the player's actions came "
        f"{max(player.lag):.2f}s at most after they were due"
    )
