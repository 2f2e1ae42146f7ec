"""Health and fragmentation figures, as tables (the definitions are in agent/README.md)."""

from dataclasses import replace

import pytest

from accel_agent import health
from accel_agent.backends import DeviceSample, MigSample, ProcessSample
from accel_api.nodereport import PodRef, RemappedRows

GIB = 1 << 30
TOTAL = 80 * GIB


def dev(index: int = 0, *, used: int = 0, procs: int = 0, **kw: object) -> DeviceSample:
    base = DeviceSample(
        index=index,
        uuid=f"GPU-{index}",
        memory_total_bytes=TOTAL,
        memory_used_bytes=used,
        processes=tuple(ProcessSample(pid=100 + i, used_memory_bytes=GIB) for i in range(procs)),
    )
    return replace(base, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mask", "names"),
    [
        (None, []),
        (0, []),
        (0x1, ["GpuIdle"]),
        (0x4 | 0x40, ["SwPowerCap", "HwThermalSlowdown"]),
        (0x80, ["HwPowerBrakeSlowdown"]),
        (0x1FF, [name for _, name in health.THROTTLE_REASONS]),
        (0x200 | 0x8, ["HwSlowdown", "Unknown0x200"]),
    ],
)
def test_decode_throttle(mask: int | None, names: list[str]) -> None:
    assert health.decode_throttle(mask) == names


@pytest.mark.parametrize(
    ("device", "problems"),
    [
        (dev(), []),
        (dev(throttle_mask=0x4), []),  # power capping under load is normal
        (dev(throttle_mask=0x1), []),
        (dev(ecc_uncorrected=0), []),
        (dev(ecc_uncorrected=3), ["uncorrectable ECC errors since driver load: 3"]),
        (dev(remapped_rows=RemappedRows(correctable=5)), []),
        (dev(remapped_rows=RemappedRows(pending=True)), ["row remapping pending: the device needs a reset"]),
        (dev(remapped_rows=RemappedRows(failed=True)), ["row remapping failed: the device needs replacing"]),
        (dev(throttle_mask=0x40), ["throttled by HwThermalSlowdown"]),
        (dev(throttle_mask=0x80 | 0x20), ["throttled by SwThermalSlowdown, HwPowerBrakeSlowdown"]),
        (dev(throttle_mask=0x8), ["throttled by HwSlowdown"]),
        (dev(xid_errors=(13, 31, 43)), []),  # application faults
        (dev(xid_errors=(79,)), ["XID 79: GPU has fallen off the bus"]),
        (dev(xid_errors=(48, 13, 48)), ["XID 48: double-bit ECC error"]),
        (
            dev(lost=True, errors=("nvmlDeviceGetMemoryInfo: GpuIsLost",)),
            ["device lost: nvmlDeviceGetMemoryInfo: GpuIsLost"],
        ),
        (dev(lost=True), ["device lost: no answer"]),
        (
            dev(ecc_uncorrected=1, remapped_rows=RemappedRows(pending=True, failed=True), throttle_mask=0x40),
            [
                "uncorrectable ECC errors since driver load: 1",
                "row remapping failed: the device needs replacing",
                "row remapping pending: the device needs a reset",
                "throttled by HwThermalSlowdown",
            ],
        ),
        (dev(errors=("powerWatts: nvmlDeviceGetPowerUsage failed: NoPermission",)), []),  # a read error is not a fault
    ],
)
def test_device_problems(device: DeviceSample, problems: list[str]) -> None:
    assert health.device_problems(device) == problems
    assert health.is_healthy(device) is (not problems)


FREE_CASES = [
    # device, busy?
    (dev(), False),
    (dev(used=int(0.049 * TOTAL)), False),  # under 5%: free
    (dev(used=int(0.05 * TOTAL)), True),  # 5% and over: busy
    (dev(procs=1, used=GIB), True),  # a process, even a small one
    (dev(allocated_pods=(PodRef(namespace="a", name="p"),)), True),  # held by a pod, not started yet
    # memory not measurable (TPU): free or busy by processes and allocations only
    (dev(memory_total_bytes=None, memory_used_bytes=None, not_supported=("memoryUsedBytes",)), False),
    (dev(memory_used_bytes=None, errors=("memoryUsedBytes: read failed: Timeout",)), True),  # unknown is not free
]


@pytest.mark.parametrize(("device", "busy"), FREE_CASES)
def test_busy_and_free(device: DeviceSample, busy: bool) -> None:
    assert health.is_busy(device) is busy
    assert health.is_free(device) is (not busy)


def test_an_unhealthy_idle_device_is_not_free() -> None:
    assert not health.is_free(dev(ecc_uncorrected=1))


def mig(gi: int, slices: int, *, pod: bool = False) -> MigSample:
    return MigSample(
        gpu_instance_id=gi,
        profile=f"{slices}g.{slices * 10}gb",
        slices=slices,
        allocated_pods=(PodRef(namespace="a", name=f"p{gi}"),) if pod else (),
    )


@pytest.mark.parametrize(
    ("device", "unusable"),
    [
        (dev(), 0),
        (dev(mig_enabled=True, mig_max_slices=7), 0),  # MIG on, no instances: repartition freely
        (dev(mig_enabled=True, mig_max_slices=7, mig_instances=(mig(1, 3), mig(2, 1))), 0),  # all idle
        # one busy 3g; an idle 1g and 3 unallocated slices are stuck
        (dev(mig_enabled=True, mig_max_slices=7, mig_instances=(mig(1, 3, pod=True), mig(2, 1))), 4),
        # busy through a process in the instance rather than an allocation
        (
            dev(
                mig_enabled=True,
                mig_max_slices=7,
                mig_instances=(mig(1, 3), mig(2, 4)),
                processes=(ProcessSample(pid=1, gpu_instance_id=2),),
            ),
            3,
        ),
        # everything busy: nothing idle to combine
        (dev(mig_enabled=True, mig_max_slices=7, mig_instances=(mig(1, 3, pod=True), mig(2, 4, pod=True))), 0),
    ],
)
def test_unusable_mig_slices(device: DeviceSample, unusable: int) -> None:
    assert health.unusable_mig_slices(device) == unusable


@pytest.mark.parametrize(
    ("devices", "expected"),
    [
        ([], {"total_devices": 0, "free_devices": 0, "whole_node_available": False, "stranded_memory_bytes": 0}),
        (
            [dev(0), dev(1)],
            {"total_devices": 2, "free_devices": 2, "partially_used_devices": 0, "whole_node_available": True},
        ),
        (
            [dev(0), dev(1, procs=1, used=30 * GIB), dev(2, procs=2, used=70 * GIB)],
            {
                "total_devices": 3,
                "free_devices": 1,
                "partially_used_devices": 2,
                "stranded_memory_bytes": (50 + 10) * GIB,
                "whole_node_available": False,
                "largest_free_memory_bytes": TOTAL,
            },
        ),
        (
            [dev(0), dev(1, ecc_uncorrected=1)],  # unhealthy: neither free nor partial
            {"total_devices": 2, "free_devices": 1, "partially_used_devices": 0, "whole_node_available": False},
        ),
        (
            [dev(0), dev(1, mig_enabled=True, mig_max_slices=7)],  # MIG splits the node
            {"free_devices": 2, "whole_node_available": False},
        ),
        (
            [dev(0, procs=1, used=79 * GIB), dev(1, lost=True, memory_total_bytes=None, memory_used_bytes=None)],
            {
                "free_devices": 0,
                "partially_used_devices": 1,
                "stranded_memory_bytes": GIB,
                "largest_free_memory_bytes": GIB,
            },
        ),
    ],
)
def test_fragmentation(devices: list[DeviceSample], expected: dict[str, object]) -> None:
    got = health.fragmentation(devices).model_dump()
    assert {k: got[k] for k in expected} == expected
