"""snapshot._place, the best fit of a pool's unbound reservations onto its nodes' free devices:
the walk in (free devices, index) order gives what one best-fit scan per pod gave."""

from __future__ import annotations

import random
from collections.abc import Iterable

import pytest

from accel_operator.reconcile.common.snapshot import _place, _trim


def _one_pod_at_a_time(
    node_free: list[int], gangs: Iterable[tuple[int, int]], memory: list[tuple[int, ...] | None] | None = None
) -> list[int]:
    """The placement as it was: every node scanned for each pod, the largest pods first."""
    for nodes, per_node in sorted(gangs, key=lambda g: -g[1]):
        for _ in range(nodes):
            fitting = [i for i, f in enumerate(node_free) if f >= per_node]
            if not fitting:
                i = max(range(len(node_free)), key=node_free.__getitem__, default=None)
                if i is None:
                    break
                node_free[i] = 0
                if memory is not None:
                    memory[i] = _trim(memory[i], 0)
                continue
            i = min(fitting, key=node_free.__getitem__)
            node_free[i] -= per_node
            if memory is not None:
                memory[i] = _trim(memory[i], node_free[i])
    return node_free


@pytest.mark.parametrize("seed", range(300))
def test_the_walk_places_every_pod_where_a_scan_per_pod_did(seed: int) -> None:
    rnd = random.Random(seed)
    n = rnd.randint(0, 12)
    free = [rnd.choice([0, 1, 2, 3, 4, 8, 8, 8]) for _ in range(n)]
    memory: list[tuple[int, ...] | None] = [
        None if rnd.random() < 0.3 else tuple(rnd.choice([10, 20, 40, 80]) for _ in range(rnd.randint(0, 8)))
        for _ in range(n)
    ]
    # Gangs of 0 to 4 pods of 0 to 8 devices: over-committed ones (more than is free) included.
    gangs = [(rnd.randint(0, 4), rnd.choice([0, 1, 1, 2, 4, 8])) for _ in range(rnd.randint(0, 30))]
    want_memory, got_memory = list(memory), list(memory)
    want = _one_pod_at_a_time(list(free), gangs, want_memory)
    assert _place(list(free), gangs, got_memory) == want
    assert got_memory == want_memory
    assert _place(list(free), gangs) == want  # without memory


def test_a_burst_of_one_device_pods_fills_the_fullest_nodes_first() -> None:
    free = [8, 3, 8, 1, 3]
    assert _place(free, [(1, 1)] * 6) == [8, 0, 8, 0, 1]
