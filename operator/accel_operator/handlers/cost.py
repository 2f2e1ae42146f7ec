"""kopf wiring of the cost accountant (:mod:`accel_operator.engine.accountant`): built from the
context, started with the operator and awaited at its stop."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import kopf

from accel_operator.context import OperatorContext
from accel_operator.engine.accountant import Accountant
from accel_operator.engine.scheduler import Scheduler


def register(reg: kopf.OperatorRegistry, sched: Scheduler, ctx: OperatorContext) -> Accountant:
    accountant = Accountant(scheduler=sched, writer=ctx.writer, costs=ctx.costs, prices=ctx.prices)

    @kopf.on.startup(registry=reg)
    async def start_accounting(memo: kopf.Memo, **_: Any) -> None:
        memo.cost_task = asyncio.create_task(accountant.run(), name="accel-cost")

    @kopf.on.cleanup(registry=reg)
    async def stop_accounting(memo: kopf.Memo, **_: Any) -> None:
        task = memo.get("cost_task")
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    return accountant
