"""The garbage collector's thresholds for a process that runs the engine.

The engine keeps tens of thousands of long-lived objects (the cache's views of jobs, pods and
nodes, plans, ledgers) and allocates many short-lived ones per pass (decisions, status forms,
snapshots' views). With CPython's default thresholds (700 allocations for a young collection,
then every 10th and 10th again for older generations) a busy pass triggers thousands of young
collections and many collections of the middle generation, each walking objects that survive
anyway: profiled at 2,000 nodes and 20,000 jobs (``bench/sim_scale.py``), the collector took
35-38 % of the run's CPU. A larger young threshold collects as often per byte as the workload
needs (garbage cycles here are rare: views and plans are acyclic) and older generations far less
often; the full collection still runs, also under CPython's own rule that it waits until the
objects waiting for it are a quarter of those it would walk.

Measured with ``python bench/sim_scale.py --sizes 2000x20000 --ticks 40`` (same trace, same
admissions, same peak RSS): the engine's CPU 59 -> 43 s, the burst pass 4.5 -> 2.9 s
(docs/scale.md). The operator (``app.main``), ``accelctl simulate`` and the benches that stand for
the operator call :func:`tune` once at start.
"""

from __future__ import annotations

import gc

YOUNG = 50_000  # allocations less deallocations before a young collection (CPython: 700)
MIDDLE = 50  # young collections before a middle one (CPython: 10)
OLD = 1_000  # middle collections before a full one is considered (CPython: 10)


def tune() -> tuple[int, int, int]:
    """Set the collector's thresholds for the engine; returns the ones it had."""
    before = gc.get_threshold()
    gc.set_threshold(YOUNG, MIDDLE, OLD)
    return before
