"""bench/gpu/measure_fsdp_pools.py's bookkeeping of the allocator's trace, without a GPU."""

from __future__ import annotations

from bench.gpu import measure_fsdp_pools as pools

NAMES = {0: "default", 7: "reduce_scatter"}


def test_each_streams_peak_and_its_share_at_the_devices_peak() -> None:
    # 100 allocated on the default stream before the step (the inactive block is cached, not
    # allocated); the reduce-scatter stream grows while the default stream frees its transients.
    start = [{"stream": 0, "blocks": [{"size": 100, "state": "active_allocated"}, {"size": 50, "state": "inactive"}]}]
    trace = [
        {"action": "alloc", "stream": 0, "size": 80},  # the forward's activations: the device's peak, 180
        {"action": "segment_alloc", "stream": 7, "size": 64},  # not an allocation
        {"action": "free_completed", "stream": 0, "size": 80},
        {"action": "alloc", "stream": 7, "size": 30},  # gradient shards
        {"action": "alloc", "stream": 7, "size": 30},
        {"action": "free_requested", "stream": 7, "size": 30},  # counted once it completes
    ]
    out = pools._by_stream(NAMES, start, trace)
    assert out["peak"] == {"default": 180, "reduce_scatter": 60}
    assert out["at_peak"] == {"default": 180}
    assert out["trace_peak"] == 180
    assert out["alloc"] == {"default": 100, "reduce_scatter": 60}


def test_an_unknown_stream_is_other() -> None:
    out = pools._by_stream(NAMES, [], [{"action": "alloc", "stream": 99, "size": 5}])
    assert out["peak"] == {"other": 5}


def test_every_configuration_is_an_fsdp2_one() -> None:
    assert {c.sharding for c in pools.CONFIGS} == {"fsdp_full", "fsdp_grad_op"}
    assert len({c.name for c in pools.CONFIGS}) == len(pools.CONFIGS)
