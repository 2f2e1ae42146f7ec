"""The plans let go and made again decide what the plans kept decide.

The scheduler keeps whole only the plans used last (the setting ``plans_kept``, its env
ACCEL_OPERATOR_PLANS_KEPT, which the bench's settings read); a waiting job whose
plan was let go is planned again from the inputs its plan was made from. Over the fleet-size
bench's world (pools of GPUs and TPUs, spot and on-demand, jobs naming one or two pools, a burst
and then arrivals and endings on a virtual clock), the passes with every plan kept and the passes
with all but one let go write the same statuses (the plans' wire forms included), the same
actions, for the same jobs in the same order, pass after pass.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from bench import sim_scale

from accel_operator.engine import plans, schedule

TICKS = 8
_PASS = schedule.schedule_pass  # the real ones, whatever a run patched
_PLANNED = plans.Entry.planned


def _run(monkeypatch: pytest.MonkeyPatch, seed: int, built: int) -> tuple[list[list[tuple[Any, ...]]], int]:
    """Every pass's writes as (job, phase, patch, actions), and how many plans were made again."""
    monkeypatch.setenv("ACCEL_OPERATOR_PLANS_KEPT", str(built))
    passes: list[list[tuple[Any, ...]]] = []

    def recording(*args: Any, **kwargs: Any) -> schedule.Pass:
        result = _PASS(*args, **kwargs)
        passes.append([(w.job.key, w.decision.phase, w.patch, w.decision.actions) for w in result.writes])
        return result

    monkeypatch.setattr(schedule, "schedule_pass", recording)
    made = 0

    def counting(entry: plans.Entry) -> Any:
        nonlocal made
        made += entry.plan is None
        return _PLANNED(entry)

    monkeypatch.setattr(plans.Entry, "planned", counting)

    async def run() -> None:
        sim = sim_scale.Sim(nodes=240, jobs=700, pools=24, seed=seed)
        sim.build()
        await sim.one_pass()
        index = 0
        for _ in range(200):  # the burst
            sim.arrive(index)
            index += 1
        await sim.one_pass()
        sim.settle()
        for _tick in range(TICKS):
            sim.clock.advance(sim_scale.TICK_SECONDS * 5)
            for _ in range(60):
                sim.arrive(index)
                index += 1
            sim.finish_due()
            await sim.one_pass()
            sim.settle()

    asyncio.run(run())
    return passes, made


@pytest.mark.parametrize("seed", [1, 2])
def test_plans_let_go_and_made_again_write_what_the_plans_kept_write(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    kept, made_kept = _run(monkeypatch, seed, built=1_000_000)
    let_go, made_again = _run(monkeypatch, seed, built=1)
    assert made_kept == 0  # nothing was let go ...
    assert made_again > 50  # ... and here the waiting jobs decided again were planned again
    assert sum(len(p) for p in kept) > 500
    assert len(let_go) == len(kept)
    for i, (a, b) in enumerate(zip(kept, let_go, strict=True)):
        assert [w[0] for w in a] == [w[0] for w in b], f"pass {i} decides other jobs"
        for x, y in zip(a, b, strict=True):
            assert x == y, f"pass {i} differs for {x[0]}"
