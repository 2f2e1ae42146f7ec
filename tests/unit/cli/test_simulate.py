"""``accelctl simulate``: the trace's validation (errors name the line and field), a small replay
deterministic from its seed, the strategies' order of cost, and the generator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from accel_operator.cli import main
from accel_operator.simulate import figures, generate, replay, trace

ROOT = Path(__file__).resolve().parents[3]
POOLS = (ROOT / "examples" / "simulate" / "pools.yaml").read_text()


def _line(**kw: object) -> str:
    doc = {"submit": 0, "team": "research", "model": "tinyllama-1.1b", "tokens": 10**8, **kw}
    return json.dumps(doc)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("not json", "trace:1: not JSON"),
        (_line(submit=-5), "trace:1: submit: Input should be greater than or equal to 0"),
        (_line(team="Bad_Team"), "trace:1: team: String should match pattern"),
        (_line(model="gpt-9"), "trace:1: model: Input should be"),
        (_line(tokens=0), "trace:1: tokens: Input should be greater than or equal to 1"),
        (_line(deadlineHours=0), "trace:1: deadlineHours: Input should be greater than 0"),
        (_line(spot="sometimes"), "trace:1: spot: Input should be"),
        (_line(extra=1), "trace:1: extra: Extra inputs are not permitted"),
        (json.dumps({"submit": 0, "team": "a"}), "the compact form needs model"),
        (_line(spec={"image": "x"}), "either spec"),
        (json.dumps({"submit": 0, "team": "a", "spec": {"image": "x"}}), "trace:1: spec.model"),
        ("\n" + _line() + "\n" + _line(devices=0), "trace:3: devices:"),
        ("x" * (trace.MAX_LINE_CHARS + 1), f"at most {trace.MAX_LINE_CHARS}"),
        ("", "the trace holds no job"),
    ],
)
def test_trace_errors_name_the_line_and_field(text: str, expected: str) -> None:
    with pytest.raises(trace.TraceError) as err:
        trace.read_trace(text)
    assert any(expected in p for p in err.value.problems), err.value.problems
    assert all(len(p) < 400 for p in err.value.problems)  # a long bad line is never echoed whole


def test_the_compact_form_becomes_a_spec() -> None:
    (a,) = trace.read_trace(_line(devices=2, deadlineHours=6, checkpointMinutes=20, spot="prefer"))
    assert a.spec.team == "research" and a.spec.placement.max_devices == 2
    assert a.spec.deadline == "360m" and a.spec.spot.policy.value == "prefer"
    assert a.spec.checkpoint is not None and a.spec.checkpoint.uri == "s3://ckpt/research/job-000001"


def test_pools_must_be_pools() -> None:
    with pytest.raises(trace.TraceError, match="kind must be AcceleratorPool"):
        trace.read_pools((ROOT / "examples" / "01-finetune-single-gpu.yaml").read_text())


def _run(lines: str, strategy: str, seed: int = 7) -> dict[str, Any]:
    arrivals = trace.read_trace(lines)
    pools = trace.read_pools(POOLS)
    return figures.figures(replay.replay(pools, arrivals, seed=seed, strategy=replay.STRATEGIES[strategy]))


@pytest.fixture(scope="module")
def twenty() -> str:
    return generate.to_jsonl(generate.generate(20, 1.0, seed=3))


def test_a_twenty_job_replay_is_deterministic_from_its_seed(twenty: str) -> None:
    first = _run(twenty, "engine")
    assert first == _run(twenty, "engine")
    assert first["jobs"] == 20 and first["succeeded"] == 20
    assert first["cost_usd"] > 0 and first["device_hours"] > 0


def test_on_demand_costs_at_least_the_engine(twenty: str) -> None:
    engine, on_demand = _run(twenty, "engine"), _run(twenty, "on-demand")
    assert on_demand["preemptions"] == 0 and on_demand["spot_savings_usd"] == 0
    assert on_demand["cost_usd"] >= engine["cost_usd"]


def test_preemption_loses_the_work_since_the_last_checkpoint() -> None:
    # One long 8-device training job on spot only, preempted often: work is lost and retried.
    line = _line(model="llama-3-8b", tokens=2 * 10**10, devices=8, spot="require", checkpointMinutes=60)
    out = _run(line, "engine", seed=1)
    assert out["succeeded"] == 1 and out["preemptions"] >= 1
    assert out["lost_device_hours"] > 0 and out["lost_to_preemption_usd"] > 0


def test_the_generator_is_seeded_and_valid() -> None:
    a = generate.generate(300, 7.0, seed=5)
    assert a == generate.generate(300, 7.0, seed=5) and a != generate.generate(300, 7.0, seed=6)
    arrivals = trace.read_trace(generate.to_jsonl(a))
    assert len(arrivals) == 300 and all(0 <= x.submit <= 7 * 86_400 for x in arrivals)
    sizes = [x.spec.placement.max_devices for x in arrivals]
    assert sizes.count(1) > len(sizes) / 3  # heavy at one device (Philly's shape)
    with pytest.raises(ValueError, match="--jobs"):
        generate.generate(0, 1.0, seed=1)


def test_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.jsonl"
    assert main.main(["simulate", "generate", "--jobs", "5", "--days", "1", "-o", str(path)]) == 0
    pools = tmp_path / "pools.yaml"
    pools.write_text(POOLS)
    capsys.readouterr()
    assert main.main(["simulate", "--trace", str(path), "--pools", str(pools), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["strategy"] for r in doc["strategies"]] == ["engine", "on-demand", "ordered-flavors"]
    path.write_text(_line(submit=-1))
    assert main.main(["simulate", "--trace", str(path), "--pools", str(pools)]) == 2
    assert "submit" in capsys.readouterr().err


def test_ordered_flavors_takes_spot_first_and_knows_no_memory() -> None:
    # A 70B model on one device: the baseline sizes it as submitted and pins it to the first spot
    # flavor with room, where it cannot fit in memory; the small job runs on spot.
    lines = "\n".join(
        [
            _line(model="llama-3-70b", tokens=10**6, devices=1),
            _line(submit=10, devices=1, checkpointMinutes=30),
            _line(submit=20, devices=1, spot="never"),
        ]
    )
    arrivals = trace.read_trace(lines)
    result = replay.replay(trace.read_pools(POOLS), arrivals, seed=2, strategy=replay.STRATEGIES["ordered-flavors"])
    out = figures.figures(result)
    assert out["failed_for_memory"] == 1 and out["succeeded"] == 2
    plans = {k[1]: s.plan for k, s in result.statuses.items()}
    assert plans["job-000002"] is not None and plans["job-000002"].pool == "h100-spot-a"
    assert plans["job-000003"] is not None and plans["job-000003"].pool == "h100-on-demand"  # kept off spot
    assert out == figures.figures(
        replay.replay(trace.read_pools(POOLS), arrivals, seed=2, strategy=replay.STRATEGIES["ordered-flavors"])
    )


def test_a_job_no_flavor_can_hold_is_counted_unfinished() -> None:
    # 128 devices: more than any pool of the example fleet (96 at most), so no flavor's quota holds it.
    lines = "\n".join([_line(model="llama-3-8b", devices=128), _line(submit=5, devices=1)])
    out = _run(lines, "ordered-flavors")
    assert out["jobs"] == 2 and out["succeeded"] == 1 and out["unfinished"] == 1


def test_the_replay_reports_its_progress(twenty: str) -> None:
    arrivals = trace.read_trace(twenty)
    seen: list[int] = []
    replay.replay(trace.read_pools(POOLS), arrivals, seed=7, strategy=replay.STRATEGIES["engine"], progress=seen.append)
    assert seen and seen == sorted(seen) and seen[-1] == len(arrivals)


def _disrupting(*lines: dict[str, object]) -> str:
    return "\n".join([_line(name="a"), *(json.dumps(d) for d in lines)])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (_disrupting({"disrupt": 30, "job": "b"}), "trace:2: job: no job of the trace is named 'b'"),
        (_disrupting({"disrupt": 0, "job": "a"}), "trace:2: disrupt: Input should be greater than 0"),
        (_disrupting({"disrupt": 5, "job": "a", "pool": "x"}), "trace:2: pool: Extra inputs are not permitted"),
        (_disrupting({"disrupt": 5, "job": "a", "attempt": -1}), "trace:2: attempt: Input should be greater"),
        (_disrupting({"disrupt": 5, "job": "a"}, {"disrupt": 9, "job": "a"}), "trace:3: job: a second disruption"),
    ],
)
def test_disruption_lines_are_checked(text: str, expected: str) -> None:
    with pytest.raises(trace.TraceError) as err:
        trace.read_trace_events(text)
    assert any(expected in p for p in err.value.problems), err.value.problems


def test_a_disruption_of_the_trace_preempts_that_attempt_and_the_resume_keeps_the_checkpointed_work() -> None:
    # 1M tokens of TinyLlama: 26 s on one H100; 4M: 104 s. Reclaimed 75 s in, with a checkpoint a
    # minute: 60 s kept, 15 s lost; attempt 1 (the first resume) adds the pool's restartSeconds.
    pools = trace.read_pools(POOLS.replace("preemptionRatePerHour: 0.05", "preemptionRatePerHour: 0"))
    pools = [p for p in pools if p.metadata.name == "h100-spot-a"]
    text = "\n".join(
        [
            _line(name="ck", tokens=4_000_000, devices=1, checkpointMinutes=1, spot="require"),
            json.dumps({"disrupt": 75, "job": "ck"}),
        ]
    )
    arrivals, disruptions = trace.read_trace_events(text)
    assert disruptions == [trace.Disruption(75.0, "ck", 0)]
    result = replay.replay(pools, arrivals, seed=1, strategy=replay.STRATEGIES["engine"], disruptions=disruptions)
    (rec,) = result.records.values()
    (st,) = result.statuses.values()
    assert st.phase is not None and st.phase.value == "Succeeded" and st.attempt == 1 and rec.preemptions == 1
    assert rec.lost_device_seconds == pytest.approx(15.0)
    assert st.cost is not None and st.cost.lost_device_seconds == pytest.approx(15.0)  # the ledger agrees
    duration = (st.plan.duration_seconds if st.plan is not None else None) or 0.0
    assert duration == pytest.approx(104.4, abs=1)
    restart = pools[0].spec.restart_seconds
    assert st.cost.device_seconds == pytest.approx(75 + restart + duration - 60, abs=0.01)
    # The same trace without its disruption line runs once.
    plain = replay.replay(pools, arrivals, seed=1, strategy=replay.STRATEGIES["engine"])
    assert [r.preemptions for r in plain.records.values()] == [0]
