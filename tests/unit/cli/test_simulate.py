"""``accelctl simulate``: the trace's validation (errors name the line and field), a small replay
deterministic from its seed, the strategies' order of cost, and the generator."""

from __future__ import annotations

import asyncio
import json
import random
import threading
from pathlib import Path
from typing import Any

import pytest

from accel_api.job import AcceleratorJobStatus
from accel_operator.adapters.kube import views
from accel_operator.cli import main, simhtml
from accel_operator.settings import OperatorSettings
from accel_operator.simulate import figures, generate, replay, runner, trace

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


def test_strategies_in_worker_processes_give_the_same_figures_in_order(
    tmp_path: Path, twenty: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path, pools = tmp_path / "t.jsonl", tmp_path / "pools.yaml"
    path.write_text(twenty)
    pools.write_text(POOLS)
    docs = []
    for workers in ("1", "3"):
        args = ["simulate", "--trace", str(path), "--pools", str(pools), "--seed", "5", "--workers", workers]
        assert main.main([*args, "-o", "json"]) == 0
        docs.append(json.loads(capsys.readouterr().out))
    assert [r["strategy"] for r in docs[1]["strategies"]] == ["engine", "on-demand", "ordered-flavors"]
    assert docs[0] == docs[1]
    assert main.main(["simulate", "--trace", str(path), "--pools", str(pools), "--workers", "0"]) == 2
    assert "--workers: must be 1 to" in capsys.readouterr().err


def test_a_failing_worker_is_reported_with_its_strategy(
    tmp_path: Path, twenty: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, pools = tmp_path / "t.jsonl", tmp_path / "pools.yaml"
    path.write_text(twenty)
    pools.write_text(POOLS)

    def broken(*_args: object, **_kw: object) -> object:
        raise ValueError("boom in the replay")

    monkeypatch.setattr(replay, "replay", broken)
    with pytest.raises(RuntimeError, match=r"the engine replay failed:(.|\n)*boom in the replay"):
        main.main(["simulate", "--trace", str(path), "--pools", str(pools), "--workers", "2", "-o", "json"])


def test_ordered_flavors_runs_a_long_gang_on_a_busy_spot_flavor_however_often_it_is_preempted() -> None:
    # The first 70B gang takes 64 of h100-spot-a's 96 devices, so the second goes to h100-spot-b
    # (0.15 preemptions a node-hour, 8 nodes: about 50 expected over its run, more than the
    # compact form's spot.maxPreemptions 20). Kueue admits by quota and does not count them; the
    # engine's planner would refuse that pinned plan, so the baseline must not carry the cap.
    big = {"model": "llama-3-70b", "tokens": 8 * 10**9, "devices": 64, "checkpointMinutes": 30}
    arrivals = trace.read_trace("\n".join([_line(**big), _line(submit=10, **big)]))
    result = replay.replay(trace.read_pools(POOLS), arrivals, seed=3, strategy=replay.STRATEGIES["ordered-flavors"])
    out = figures.figures(result)
    assert out["failed_for_memory"] == 0 and out["succeeded"] == 2
    second = result.records[("research", "job-000002")]
    assert second.pool == "h100-spot-b" and second.preemptions > 20


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


ONE_NODE = """
apiVersion: accel.dev/v1alpha1
kind: AcceleratorPool
metadata: {name: small}
spec:
  provider: aws
  accelerator: h100-80gb
  devicesPerNode: 8
  maxNodes: 1
  nodeSelector: {pool: small}
"""


def test_a_job_waiting_hours_for_devices_costs_no_pass_per_tick() -> None:
    # Two 8-device jobs on one 8-device node: the second waits hours for the first. The engine has
    # nothing to decide meanwhile (the operator's loop runs no pass then), so neither does the
    # replay: it jumps to the first job's end instead of passing every 5 virtual minutes.
    big = {"model": "llama-3-8b", "tokens": 2 * 10**9, "devices": 8, "spot": "never"}
    lines = "\n".join([_line(**big), _line(submit=10, **big)])
    result = replay.replay(
        trace.read_pools(ONE_NODE), trace.read_trace(lines), seed=1, strategy=replay.STRATEGIES["engine"]
    )
    out = figures.figures(result)
    assert out["succeeded"] == 2 and out["queue_delay_s"]["p95"] > 3 * 3600  # it did wait hours
    assert result.passes < 30, result.passes


def test_the_engines_writes_run_inline_without_threads(twenty: str) -> None:
    before = {t.ident for t in threading.enumerate()}
    _run(twenty, "engine")
    started = [t.name for t in threading.enumerate() if t.ident not in before]
    assert not started, started


def test_idle_is_the_fleets_device_hours_no_pod_held() -> None:
    lines = "\n".join([_line(model="llama-3-8b", tokens=2 * 10**9, devices=4, spot="never")])
    result = replay.replay(
        trace.read_pools(ONE_NODE), trace.read_trace(lines), seed=1, strategy=replay.STRATEGIES["engine"]
    )
    out = figures.figures(result)
    held = 8 * result.span_seconds / 3600
    assert out["idle_device_hours"] == pytest.approx(held - out["device_hours"], rel=0.01)
    assert out["idle_device_hours"] == pytest.approx(held / 2, rel=0.01)  # 4 of the node's 8 devices
    price = result.pool_price["small"]
    assert price > 0 and out["idle_usd"] == pytest.approx(out["idle_device_hours"] * price, rel=0.01)


def _policy(tmp_path: Path, name: str, spec: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"apiVersion: accel.dev/v1alpha1\nkind: AcceleratorPolicy\nmetadata: {{name: {name}}}\nspec:\n{spec}"
    )
    return path


def test_each_policy_file_is_an_engine_strategy_and_its_refusals_are_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = "\n".join(
        [
            _line(devices=1, spot="never"),
            _line(submit=60, devices=2, spot="never"),  # over the cap of one device
            _line(submit=120, team="vision", devices=1),  # spot without a checkpoint
        ]
    )
    path = tmp_path / "t.jsonl"
    path.write_text(lines)
    pools = tmp_path / "pools.yaml"
    pools.write_text(POOLS)
    small = _policy(tmp_path, "small-jobs", "  maxDevicesPerJob: 1\n")
    loose = _policy(tmp_path, "loose", "  spot: {requireCheckpoint: false}\n")
    argv = ["simulate", "--trace", str(path), "--pools", str(pools), "--strategy", "engine", "-o", "json"]
    assert main.main([*argv, "--policy", str(small), "--policy", str(loose)]) == 0
    rows = {r["strategy"]: r for r in json.loads(capsys.readouterr().out)["strategies"]}
    assert list(rows) == ["engine", "small-jobs", "loose"]
    assert rows["engine"]["succeeded"] == 3 and rows["engine"]["refused_by_policy"] == 0
    assert rows["small-jobs"]["succeeded"] == 1 and rows["small-jobs"]["refused_by_policy"] == 2
    assert rows["small-jobs"]["refused_rules"] == {"max-devices": 1, "spot-needs-checkpoint": 1}
    assert rows["loose"]["succeeded"] == 3 and rows["loose"]["refused_by_policy"] == 0


def test_a_budget_holds_new_jobs_and_its_overrun_is_counted_per_team(tmp_path: Path) -> None:
    # research may spend $5 a day: its first job runs (and runs over: a running job is never
    # stopped); the one after it waits for the next day's budget.
    lines = "\n".join(
        [
            _line(devices=1, spot="never", tokens=10**9),
            _line(submit=11_000, devices=1, spot="never", tokens=10**9),  # after 3 hours of the first
            _line(submit=7300, team="vision", devices=1, spot="never"),
        ]
    )
    (pol,) = trace.read_policies(
        _policy(tmp_path, "budget", "  budgets:\n    - {team: research, period: daily, limitUsd: 5}\n").read_text()
    )
    strategy = replay.Strategy("budget", policies=(pol,))
    result = replay.replay(trace.read_pools(POOLS), trace.read_trace(lines), seed=1, strategy=strategy)
    out = figures.figures(result)
    assert out["budget_overrun_by_team_usd"]["research"] > 0
    assert "vision" not in out["budget_overrun_by_team_usd"]  # no budget, no overrun
    plain = replay.replay(
        trace.read_pools(POOLS), trace.read_trace(lines), seed=1, strategy=replay.STRATEGIES["engine"]
    )
    assert figures.figures(plain)["budget_overrun_by_team_usd"] == {}
    second = ("research", "job-000002")
    assert plain.records[second].first_start == pytest.approx(11_000, abs=60)
    start = result.records[second].first_start
    assert start is not None and start >= 86_400  # held for the next day's budget
    assert out["cost_over_time_usd"] and out["cost_over_time_usd"][-1][1] == pytest.approx(out["cost_usd"], abs=0.05)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "kind: AcceleratorPolicy\napiVersion: accel.dev/v1alpha1\nmetadata: {name: p}\n"
            "spec: {maxDevicesPerJob: 0}\n",
            "bad.yaml: document 1: spec.maxDevicesPerJob",
        ),
        (POOLS, "bad.yaml: document 1: kind must be AcceleratorPolicy"),
        ("", "bad.yaml: no AcceleratorPolicy"),
        (
            "kind: AcceleratorPolicy\napiVersion: accel.dev/v1alpha1\nmetadata: {name: engine}\nspec: {}\n",
            "bad.yaml: metadata.name: strategy 'engine' is already run",
        ),
    ],
)
def test_bad_policy_files_name_the_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    pools = tmp_path / "pools.yaml"
    pools.write_text(POOLS)
    path = tmp_path / "t.jsonl"
    path.write_text(_line())
    assert main.main(["simulate", "--trace", str(path), "--pools", str(pools), "--policy", str(bad)]) == 2
    assert expected in capsys.readouterr().err


def test_the_html_page_is_self_contained_and_escapes_every_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([_line(devices=1, deadlineHours=48), _line(submit=60, team="vision", devices=1)]))
    pools = tmp_path / "pools.yaml"
    pools.write_text(POOLS)
    argv = ["simulate", "--trace", str(path), "--pools", str(pools), "--strategy", "engine", "--strategy", "on-demand"]
    assert main.main([*argv, "-o", "html"]) == 0
    page = capsys.readouterr().out
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page and "src=" not in page
    assert "default-src 'none'" in page  # nothing outside the page is fetched
    for chart in ("team-cost", "cost-lost", "deadlines", "queueing", "over-time"):
        assert f'id="{chart}"' in page
    assert page.count('data-series="engine"') >= 3 and page.count('data-series="on-demand"') >= 3
    # Hostile names (a strategy, a team, the trace's path) never reach the page as markup.
    rows = [
        {
            **figures.figures(
                replay.replay(
                    trace.read_pools(POOLS), trace.read_trace(_line()), seed=1, strategy=replay.STRATEGIES["engine"]
                )
            ),
            "strategy": "<script>alert(1)</script>",
        }
    ]
    rows[0]["cost_by_team_usd"] = {"<img src=x onerror=alert(1)>": 5.0}
    page = simhtml.render(rows, trace="<b>t</b>", seed=1)
    assert "<script>" not in page and "<img" not in page and "<b>t" not in page
    assert "&lt;script&gt;" in page


def test_the_ledger_charges_every_device_second_the_pods_held() -> None:
    # The accountant steps on the hour while jobs run (as the operator's does, every interval):
    # stepped only at events, it charged 2.3% fewer device-hours than the pods held on this trace.
    t = generate.to_jsonl(generate.generate(60, 2.0, seed=3))
    result = replay.replay(trace.read_pools(POOLS), trace.read_trace(t), seed=7, strategy=replay.STRATEGIES["engine"])
    charged = sum(s.cost.device_seconds for s in result.statuses.values() if s.cost)
    assert charged == pytest.approx(sum(result.busy.values()), rel=1e-6)


SPOT_JOB = _line(model="llama-3-8b", tokens=10**10, devices=8, spot="require", checkpointMinutes=60)


def _recorded(**kw: Any) -> dict[str, Any]:
    result = replay.replay(
        trace.read_pools(POOLS),
        trace.read_trace(SPOT_JOB),
        seed=1,
        strategy=replay.STRATEGIES["engine"],
        recorded=replay.Recorded(**kw),
    )
    return figures.figures(result)


def test_a_recorded_interruption_series_replaces_the_poisson_draws() -> None:
    pools = {"h100-spot-a", "h100-spot-b", "h100-on-demand", "l4-on-demand"}
    once = trace.read_series("time,pool,nodes\n3000,h100-spot-a,1\n3000,h100-spot-b,1\n", "nodes", pools)
    silent = {"h100-spot-a": 0.0, "h100-spot-b": 0.0}  # no notice: --warning POOL=0
    out = _recorded(interruptions=tuple(once), warning=silent)
    assert out["preemptions"] == 1 and out["succeeded"] == 1  # exactly the recorded one, no draws
    assert out["lost_device_hours"] == pytest.approx(8 * 3000 / 3600, rel=0.01)  # no checkpoint in 50 minutes
    warned = _recorded(interruptions=tuple(once), warning={"h100-spot-a": 300.0, "h100-spot-b": 300.0})
    assert warned["preemptions"] == 1
    assert warned["lost_device_hours"] == pytest.approx(8 * 300 / 3600, rel=0.01)  # saved at the warning
    # Without --warning an AWS spot pool gives its cloud's two-minute notice.
    default = _recorded(interruptions=tuple(once))
    assert default["preemptions"] == 1
    assert default["lost_device_hours"] == pytest.approx(8 * 120 / 3600, abs=0.005)  # figures round to 0.01


def test_a_spot_price_series_moves_the_ledger() -> None:
    pools = {"h100-spot-a", "h100-spot-b", "h100-on-demand", "l4-on-demand"}
    dear = trace.read_series("time,pool,price\n0,h100-spot-a,5.0\n0,h100-spot-b,4.4\n", "price", pools)
    # An interruption long after the job: the spot pools have no Poisson draws, so the job runs
    # through on either price and only the price differs.
    calm = (trace.Point(10**7, "h100-spot-a", 1), trace.Point(10**7, "h100-spot-b", 1))
    base = _recorded(interruptions=calm)
    doubled = _recorded(prices=tuple(dear), interruptions=calm)
    assert base["preemptions"] == 0 == doubled["preemptions"]
    assert doubled["cost_usd"] == pytest.approx(2 * base["cost_usd"], rel=0.02)


@pytest.mark.parametrize(
    ("text", "column", "expected"),
    [
        ("at,pool,nodes\n", "nodes", "s.csv:1: the header must be time,pool,nodes"),
        ("time,pool,nodes\nx,h100-spot-a,1\n", "nodes", "s.csv:2: time: not a number"),
        ("time,pool,nodes\n5,nowhere,1\n", "nodes", "s.csv:2: pool: not a pool of the pools file"),
        ("time,pool,nodes\n5,h100-spot-a,0\n", "nodes", "s.csv:2: nodes: must be 1 to"),
        ("time,pool,price\n5,h100-spot-a,-1\n", "price", "s.csv:2: price: must be 0 to 1000"),
        ("time,pool,price\n5,h100-spot-a\n", "price", "s.csv:2: 2 fields; want 3"),
    ],
)
def test_bad_series_name_the_line_and_field(text: str, column: str, expected: str) -> None:
    with pytest.raises(trace.TraceError) as err:
        trace.read_series(text, column, {"h100-spot-a"}, source="s.csv")
    assert any(expected in p for p in err.value.problems), err.value.problems


def test_a_bad_warning_names_the_pool() -> None:
    with pytest.raises(trace.TraceError, match="want POOL=SECONDS"):
        trace.read_lead_times(["nowhere=30"], {"h100-spot-a"})
    with pytest.raises(trace.TraceError, match="0 to 3600"):
        trace.read_lead_times(["h100-spot-a=7200"], {"h100-spot-a"})
    assert trace.read_lead_times(["h100-spot-a=120"], {"h100-spot-a"}) == {"h100-spot-a": 120.0}


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


class _Told:
    """A reporter that keeps what the runner told it."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, int]] = []
        self.advanced = 0

    def step(self, what: str, total: int = 0) -> None:
        self.steps.append((what, total))

    def advance(self, n: int = 1) -> None:
        assert n >= 0
        self.advanced += n


@pytest.mark.parametrize("workers", [1, 3])
def test_the_runner_tells_every_arrival_once_in_turn_or_in_workers(twenty: str, workers: int) -> None:
    arrivals, disruptions = trace.read_trace_events(twenty, source="t")
    pools = trace.read_pools(POOLS, source="pools")
    strategies = [replay.STRATEGIES[n] for n in ("engine", "on-demand", "ordered-flavors")]
    told = _Told()
    options = {"seed": 5, "disruptions": disruptions, "recorded": None}
    rows = runner.run(runner.Replays(pools, arrivals, strategies, options), workers=workers, bar=told)
    assert [r["strategy"] for r in rows] == ["engine", "on-demand", "ordered-flavors"]
    assert told.advanced == len(arrivals) * len(strategies)
    assert sum(total for _, total in told.steps) == len(arrivals) * len(strategies)
    assert len(told.steps) == (len(strategies) if workers == 1 else 1)


def test_first_fit_index_is_the_walk_over_the_pool() -> None:
    """The per-pool index of nodes with d devices free (what a gang binds to, first fit) stays
    what a walk over the pool's nodes finds, through any takes and gives."""
    run = replay.Replay(trace.read_pools(POOLS), [], seed=1, strategy=replay.STRATEGIES["engine"])
    rng = random.Random(3)
    nodes = list(run.free)
    for _ in range(2000):
        node = rng.choice(nodes)
        top = run.pool_spec[run._pool_of_node[node]].devices_per_node
        run._set_free(node, rng.randint(0, top))
    for pool, members in run.members.items():
        for d, places in enumerate(run.fits[pool]):
            assert places == [i for i, n in enumerate(members) if run.free[n] >= d], (pool, d)


def test_a_replay_hands_back_no_task_result_to_format() -> None:
    """``replay`` runs the replay's coroutine to a None result: asyncio formats its main task
    (result included) when it restores the SIGINT handler, seconds for a whole month's statuses."""
    engine = replay.STRATEGIES["engine"]
    run = replay.Replay(trace.read_pools(POOLS), trace.read_trace(_line()), seed=1, strategy=engine)
    assert asyncio.run(run.run()) is None
    assert run.result is not None and len(run.result.records) == 1


def test_the_replays_statuses_share_equal_plans_as_the_jobs_watch_does() -> None:
    # The replay shows the engine's writes back parsed as the operator's jobs watch parses them
    # (adapters.kube.views.job_status): jobs with equal plans hold one plan object, not one each
    # (a parse of the whole status per job held its own plan: memory at 100,000 jobs).
    small = {"model": "tinyllama-1.1b", "tokens": 10**8, "devices": 1, "spot": "never"}
    lines = "\n".join(_line(submit=i, **small) for i in range(4))
    result = replay.replay(
        trace.read_pools(POOLS), trace.read_trace(lines), seed=1, strategy=replay.STRATEGIES["engine"]
    )
    plans = [s.plan for s in result.statuses.values() if s.plan is not None]
    assert len(plans) == 4
    first = plans[0]
    same = [p for p in plans if p == first]
    assert len(same) >= 2
    assert all(p is first for p in same)


def test_a_status_parsed_again_field_by_field_is_the_whole_parse(twenty: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulated watch validates again only the fields written since it last looked: at every
    look of a replay (decisions' writes, the accountant's cost writes, fields removed), the status
    it shows equals ``model_validate`` of the whole status the fake holds. (Every look parsed
    here: the replay takes the model the engine holds where it holds one, the next test.)"""
    looks: list[tuple[str, ...]] = []
    kept = replay.reparsed

    def checked(before: Any, wire: dict[str, Any], written: set[str]) -> Any:
        out = kept(before, wire, written)
        assert out == AcceleratorJobStatus.model_validate(wire), sorted(written)
        looks.append(tuple(sorted(written)))
        return out

    def parsed(self: replay.Replay, key: Any, before: AcceleratorJobStatus, fields: set[str]) -> AcceleratorJobStatus:
        return replay.reparsed(before, self.writer.statuses[key], fields)

    monkeypatch.setattr(replay, "reparsed", checked)
    monkeypatch.setattr(replay.Replay, "_shown", parsed)
    out = _run(twenty, "engine")
    assert out["succeeded"] == 20
    assert ("cost",) in looks  # a cost write alone: the plan and conditions kept, not parsed
    assert len(looks) > 40 and len(set(looks)) > 3


def test_a_field_removed_by_a_patch_is_its_default_again() -> None:
    wire = {"phase": "Running", "attempt": 2, "message": "running", "cost": {"spentUsd": 1.5}}
    before = AcceleratorJobStatus.model_validate(wire)
    del wire["message"]  # a patch that writes message: null (FakeJobWriter drops the key)
    wire["attempt"] = 3
    after = replay.reparsed(before, wire, {"message", "attempt"})
    assert after == AcceleratorJobStatus.model_validate(wire)
    assert after.message is None and after.attempt == 3 and after.cost == before.cost
    with pytest.raises(ValueError, match="notAField"):
        replay.reparsed(before, {**wire, "notAField": 1}, {"notAField"})


def _held_replay(text: str, held: float) -> tuple[replay.Result, list[tuple[str, str | None, bool]]]:
    """A replay with the operator's ``admitted_status_seconds`` at ``held``, and its status
    writes in order: (job, the phase written, whether the write says the admission)."""
    run = replay.Replay(trace.read_pools(POOLS), trace.read_trace(text), seed=5, strategy=replay.STRATEGIES["engine"])
    run.sched.settings = run.sched.settings.model_copy(update={"admitted_status_seconds": held})
    writes: list[tuple[str, str | None, bool]] = []
    patch = run.writer.patch_status

    def recording(ref: Any, status: dict[str, Any]) -> str:
        writes.append((ref.name, status.get("phase"), "admittedTime" in status))
        return patch(ref, status)

    run.writer.patch_status = recording  # type: ignore[method-assign]
    with asyncio.Runner(loop_factory=replay.InlineLoop) as runner:
        runner.run(run.run())
    assert run.result is not None
    return run.result, writes


def test_the_replay_holds_an_admissions_status_as_the_operator_does() -> None:
    """The operator's default holds an admission's status until its pods have their nodes (one
    status write says Admitted and Running); the replay does the same, and its simulated
    cluster places each gang from its batch Job's admission (the status does not say it yet).
    Before, the replay wrote Admitted by itself first whatever the operator's setting: with the
    hold on, its cluster read the placement from a status that did not hold it, and no job ran."""
    text = "\n".join(_line(submit=i * 60, name=f"j{i}", tokens=10**7 * (i + 1)) for i in range(6)) + "\n"
    held, writes = _held_replay(text, 30.0)
    assert OperatorSettings().admitted_status_seconds == 30.0  # the operator's default
    admissions = [(name, phase) for name, phase, admitted in writes if admitted]
    assert sorted(admissions) == [(f"j{i}", "Running") for i in range(6)]  # Admitted and Running, one write
    assert not any(phase == "Admitted" for _name, phase, _ in writes)
    at_once, writes_at_once = _held_replay(text, 0.0)
    assert sorted((n, p) for n, p, a in writes_at_once if a) == [(f"j{i}", "Admitted") for i in range(6)]
    assert len(writes) == len(writes_at_once) - 6  # one status write fewer per admission
    # The same runs and ledgers either way.
    for key, st in held.statuses.items():
        other = at_once.statuses[key]
        assert (st.phase, st.attempt, st.admitted_time) == (other.phase, other.attempt, other.admitted_time)
        assert st.cost is not None and other.cost is not None
        assert st.cost.spent_usd == pytest.approx(other.cost.spent_usd, abs=1e-9)


def test_a_status_the_engine_holds_the_model_of_is_shown_unparsed_and_is_the_whole_parse(
    twenty: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A look that shows one status patch whose model the engine holds (a decision's, in the
    applier's overlay; a ledger's, the accountant's ``CostStatus``) takes that model instead of
    parsing the written fields again; at every look of a replay that is what ``model_validate`` of
    the whole status the fake holds gives, and so is the applier's model of each status it writes
    (``views.job_status_patched``: the patch's fields validated, the rest kept from the model the
    job was decided on)."""
    kept_shown, kept_reparsed = replay.Replay._shown, replay.reparsed
    looks: list[tuple[str, ...]] = []
    parsed: list[tuple[str, ...]] = []

    def shown(self: replay.Replay, key: Any, before: AcceleratorJobStatus, fields: set[str]) -> AcceleratorJobStatus:
        out = kept_shown(self, key, before, fields)
        assert out == AcceleratorJobStatus.model_validate(self.writer.statuses[key]), sorted(fields)
        looks.append(tuple(sorted(fields)))
        return out

    def reparsed(before: AcceleratorJobStatus, wire: dict[str, Any], written: set[str]) -> AcceleratorJobStatus:
        parsed.append(tuple(sorted(written)))
        return kept_reparsed(before, wire, written)

    kept_patched = views.job_status_patched
    applied: list[tuple[str, ...]] = []

    def patched(before: AcceleratorJobStatus, wire: Any, fields: Any, **kw: Any) -> AcceleratorJobStatus:
        out = kept_patched(before, wire, fields, **kw)
        assert out == AcceleratorJobStatus.model_validate(wire), sorted(fields)
        applied.append(tuple(sorted(fields)))
        return out

    monkeypatch.setattr(replay.Replay, "_shown", shown)
    monkeypatch.setattr(replay, "reparsed", reparsed)
    monkeypatch.setattr(views, "job_status_patched", patched)
    out = _run(twenty, "engine")
    assert out["succeeded"] == 20
    assert len(looks) > 100 and len(set(looks)) > 3
    assert ("cost",) in looks and len(parsed) < len(looks) / 10  # decisions' and ledgers' writes taken
    assert len(applied) > 20 and len(set(applied)) > 3


def test_a_status_patched_keeps_what_the_patch_left_and_refuses_what_a_full_parse_refuses() -> None:
    wire = {"phase": "Running", "attempt": 2, "message": "running", "cost": {"spentUsd": 1.5}}
    before = views.job_status(wire)
    after_wire = {k: v for k, v in wire.items() if k != "message"} | {"attempt": 3}
    after = views.job_status_patched(before, after_wire, {"message": None, "attempt": 3})
    assert after == AcceleratorJobStatus.model_validate(after_wire)
    assert after.message is None and after.attempt == 3 and after.cost is before.cost
    with pytest.raises(ValueError, match="attempt"):
        views.job_status_patched(before, {**after_wire, "attempt": "x"}, {"attempt"})
    with pytest.raises(ValueError, match="notAField"):
        views.job_status_patched(before, {**after_wire, "notAField": 1}, {"notAField"})
