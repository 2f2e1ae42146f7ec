"""The strategies' replays of one trace, one after another or in forked worker processes at once,
with their progress told to a :class:`Reporter` (the CLI's progress bar).

Each replay is independent (its own engine, clock and ``random.Random(seed)``), so the figures are
the same whichever way they run; the rows come back in the strategies' order.
"""

from __future__ import annotations

import multiprocessing
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from queue import Empty
from typing import Any, Protocol

from accel_operator.simulate import figures, replay


class Reporter(Protocol):
    """What the runner tells of its progress: a step of ``total`` arrivals, and arrivals done."""

    def step(self, what: str, total: int = 0) -> None: ...

    def advance(self, n: int = 1) -> None: ...


def can_fork() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()


@dataclass(frozen=True)
class Replays:
    """One trace's replays: its pools and arrivals, the strategies, and ``replay.replay``'s
    other arguments (seed, disruptions, recorded series)."""

    pools: Sequence[Any]
    arrivals: Sequence[Any]
    strategies: list[replay.Strategy]
    options: dict[str, Any]

    def one(self, strategy: replay.Strategy, progress: Callable[[int], None]) -> dict[str, Any]:
        """One strategy's replay, to its figures (plain JSON values: what a worker process sends back)."""
        run = replay.replay(self.pools, self.arrivals, strategy=strategy, progress=progress, **self.options)
        return figures.figures(run)


def run(replays: Replays, *, workers: int, bar: Reporter) -> list[dict[str, Any]]:
    """Every strategy's figures, ``workers`` replays at a time (1: in this process, in turn)."""
    if min(workers, len(replays.strategies)) > 1 and can_fork():
        return _in_parallel(replays, workers=workers, bar=bar)
    return _in_turn(replays, bar)


def _in_turn(replays: Replays, bar: Reporter) -> list[dict[str, Any]]:
    strategies, arrivals = replays.strategies, replays.arrivals
    rows = []
    for k, strategy in enumerate(strategies, 1):
        bar.step(f"{strategy.name} ({k} of {len(strategies)}): jobs arrived", total=len(arrivals))

        done = [0]

        def arrived(count: int, done: list[int] = done) -> None:
            bar.advance(count - done[0])
            done[0] = count

        rows.append(replays.one(strategy, arrived))
    return rows


def _in_parallel(replays: Replays, *, workers: int, bar: Reporter) -> list[dict[str, Any]]:
    """The strategies' replays in up to ``workers`` forked processes at once. The children inherit
    the parsed trace (fork: nothing to pickle on the way in) and send back progress and their figures."""
    strategies, arrivals = replays.strategies, replays.arrivals
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    total = len(arrivals) * len(strategies)
    bar.step(f"{len(strategies)} strategies, {min(workers, len(strategies))} at a time: jobs arrived", total=total)

    every = max(1, len(arrivals) // 200)  # progress messages per child: about 200, not one per arrival

    def child(k: int, strategy: replay.Strategy) -> None:
        sent = [0]

        def arrived(count: int) -> None:
            if count - sent[0] >= every or count == len(arrivals):
                sent[0] = count
                queue.put(("progress", k, count))

        try:
            row = replays.one(strategy, arrived)
            queue.put(("done", k, row))
        except BaseException:  # noqa: BLE001 - every failure goes back to the parent, which raises it
            queue.put(("error", k, traceback.format_exc(limit=20)))

    rows: dict[int, dict[str, Any]] = {}
    seen = dict.fromkeys(range(len(strategies)), 0)
    todo = list(enumerate(strategies))
    running: dict[int, Any] = {}
    try:
        while todo or running:
            while todo and len(running) < workers:
                k, strategy = todo.pop(0)
                running[k] = ctx.Process(target=child, args=(k, strategy), daemon=True)
                running[k].start()
            try:
                kind, k, value = queue.get(timeout=1.0)
            except Empty:  # a child killed (out of memory, a signal) sends nothing: say which
                for k, proc in running.items():
                    if proc.exitcode not in (None, 0):
                        raise RuntimeError(f"the {strategies[k].name} replay died (exit {proc.exitcode})") from None
                continue
            if kind == "progress":
                bar.advance(value - seen[k])
                seen[k] = value
                continue
            running.pop(k).join()
            if kind == "error":
                raise RuntimeError(f"the {strategies[k].name} replay failed:\n{value}")
            rows[k] = value
    finally:
        for proc in running.values():
            proc.terminate()
            proc.join()
    return [rows[k] for k in range(len(strategies))]
