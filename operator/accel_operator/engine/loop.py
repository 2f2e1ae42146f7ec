"""The scheduling loop: wait for a mark (or the safety-net timer), check the Lease, run one pass;
and its end at the operator's stop.

kopf's event handlers only mark what changed (:class:`Marks`): the jobs to decide, a full pass (at
start, on the resync, after a failed pass), a capacity pass (something freed or added devices).
The loop wakes on a mark, ticks the Lease a third of a lease period apart (only the leader decides
and writes; a replica that just became leader forgets its overlay and decides every job), and runs
a pass when this replica may act and something is marked.

Passes start at least ``pass_interval_seconds`` apart (0.2 s): a pass costs a part in proportion
to the jobs the operator holds (the snapshot, the queue's order, the sweep) whatever it decides,
and in a burst every watch event woke one, about four passes per admission on the scale
benchmark. The marks of what arrives meanwhile gather into the next pass; an event waits at most
that interval more.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from dataclasses import dataclass, field
from typing import Protocol

from accel_operator.adapters.kube.lease import Elector
from accel_operator.engine import calls
from accel_operator.engine.clock import Clock
from accel_operator.metrics import OperatorMetrics
from accel_operator.reconcile.common.snapshot import JobKey
from accel_operator.settings import OperatorSettings

log = logging.getLogger("accel_operator.scheduler")

# At the operator's stop, how long the scheduling loop's last pass may take to end.
CLOSE_SECONDS = 30.0


@dataclass
class Marks:
    """What the next pass decides, as the event handlers marked it."""

    ready: bool = False
    dirty: set[JobKey] = field(default_factory=set)
    full_pass: bool = True  # decide every job (start, resync, a failed pass)
    grown_unseen: set[str] = field(default_factory=set)  # pools a ``current`` read saw grow
    capacity_pass: bool = False  # decide every waiting job (something freed or added devices)
    # Jobs marked while their last decision was being written: set aside by the pass (none may
    # decide them before that write ends) and put back in ``dirty`` by the applier when it ends.
    # Carried in ``dirty`` instead, every pass of a burst ordered, skipped and swept the whole
    # backlog of writes again: on the scale benchmark about 2,000 jobs a pass at 300 nodes
    # (``Applier._acted`` puts them back; the pass that follows decides them, as before).
    deferred: set[JobKey] = field(default_factory=set)
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def mark(self, key: JobKey) -> None:
        self.dirty.add(key)
        self.wake.set()

    def pending(self) -> bool:
        """Whether a pass has something to do: what the loop runs one for (the jobs set aside
        count, as when they were carried in ``dirty``: passes run when they did)."""
        return self.full_pass or self.capacity_pass or bool(self.dirty) or bool(self.deferred)


class Engine(Protocol):
    """What the loop reads of the engine it drives (the scheduler)."""

    marks: Marks
    settings: OperatorSettings
    metrics: OperatorMetrics
    elector: Elector
    clock: Clock

    @property
    def call_pools(self) -> calls.CallPools: ...

    def closed(self) -> bool: ...

    def can_act(self) -> bool: ...

    def lead(self) -> None: ...

    async def step(self) -> None: ...


async def run(engine: Engine, stop: asyncio.Event | None = None) -> None:
    """Until cancelled (or the engine is ``closed``): wait for a mark (or the resync interval),
    then one pass. ``engine.lead``: what a replica that just became leader does first."""
    marks, settings, clock = engine.marks, engine.settings, engine.clock
    resync = settings.resync_seconds
    last_full = clock.monotonic()
    last_tick, was_leading = 0.0, False
    # The event loop's own clock: the interval gathers real events (the engine's clock may be a
    # test's manual one).
    aloop = asyncio.get_running_loop()
    last_pass = -math.inf
    while not engine.closed() and (stop is None or not stop.is_set()):
        # asyncio.timeout, not wait_for: before Python 3.12, wait_for drops a cancellation
        # that comes as the event fires, and the loop went on past the operator's stop.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(min(resync, 1.0)):
                await marks.wake.wait()
        if engine.closed():
            return
        gap = settings.pass_interval_seconds - (aloop.time() - last_pass)
        if gap > 0 and marks.wake.is_set():
            await asyncio.sleep(gap)  # what else arrives meanwhile joins this pass
            if engine.closed():
                return
        marks.wake.clear()
        if clock.monotonic() - last_tick >= settings.lease_seconds / 3:
            last_tick = clock.monotonic()
            leading = await calls.run_in(engine.call_pools.lease, engine.elector.tick)
            engine.metrics.leader.set(1 if leading else 0)
            if leading and not was_leading:
                log.info("this replica leads: it decides and writes")
                engine.lead()
            elif was_leading and not leading:
                log.warning("this replica lost the lease: it stops deciding")
            was_leading = leading
        if not engine.can_act() or not engine.elector.leading():
            continue
        if clock.monotonic() - last_full >= resync:
            marks.full_pass = True  # the safety net: every job that should be acted on is
        if marks.full_pass:
            last_full = clock.monotonic()
        if not marks.pending():
            continue
        try:
            last_pass = aloop.time()
            await engine.step()
        except Exception:  # one bad pass must not stop the loop for every job
            engine.metrics.reconcile_errors.labels("pass").inc()
            log.exception("scheduling pass failed; retrying on the next wake")
            await asyncio.sleep(1.0)
            marks.full_pass = True


async def close(
    *,
    runner: asyncio.Task[None] | None,
    wake: asyncio.Event,
    in_flight: set[asyncio.Task[None]],
    pools: calls.CallPools,
) -> None:
    """At the operator's stop (the caller has said closed already): the scheduling loop
    (``runner``) ends first, so that no pass starts a write after the pools are shut; the writes
    in flight are cancelled (what they did not write, the next leader decides again from the
    cluster); then the call pools are shut down."""
    if runner is not None:
        runner.cancel()
        wake.set()  # should the cancellation be lost, the loop still sees closed and ends
        await asyncio.wait({runner}, timeout=CLOSE_SECONDS)
    tasks = list(in_flight)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    pools.shutdown()
