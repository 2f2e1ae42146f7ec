"""Health and fragmentation figures of one node, computed from a sample. Pure: no I/O, no clock.

The definitions (what makes a device unhealthy, what "free" and "stranded" mean, when a whole-node
job fits, which MIG slices cannot be combined) are written out in ``agent/README.md``; this module
is their only implementation, and ``tests/unit/agent/test_agent_health.py`` holds their table.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from accel_agent.backends import DeviceSample, MigSample
from accel_api.nodereport import Fragmentation

# NVML clocks-event ("throttle") reason bits, nvml.h, named as NVML names them without the prefix.
THROTTLE_REASONS: Final[tuple[tuple[int, str], ...]] = (
    (0x1, "GpuIdle"),
    (0x2, "ApplicationsClocksSetting"),
    (0x4, "SwPowerCap"),
    (0x8, "HwSlowdown"),
    (0x10, "SyncBoost"),
    (0x20, "SwThermalSlowdown"),
    (0x40, "HwThermalSlowdown"),
    (0x80, "HwPowerBrakeSlowdown"),
    (0x100, "DisplayClockSetting"),
)
# Reasons that mean the hardware is protecting itself (too hot, power brake asserted by the
# board/PSU): the device is slow for reasons a job cannot fix. SwPowerCap is normal under load.
FAULT_THROTTLE: Final = frozenset({"HwSlowdown", "SwThermalSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown"})

# XIDs that mean the device (not the application) is in trouble; NVIDIA's XID catalogue.
# 13/31/43/45 (application faults, a killed context) are counted in metrics but not held against
# the device.
FAULT_XIDS: Final[dict[int, str]] = {
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    63: "row-remapping event",
    64: "row-remapping failure",
    68: "video processor exception",
    69: "graphics engine class error",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}


@dataclass(frozen=True)
class HealthPolicy:
    free_memory_fraction: float = 0.05  # a device under 5% memory used, with no process, is free
    fault_throttle: frozenset[str] = FAULT_THROTTLE
    fault_xids: frozenset[int] = field(default_factory=lambda: frozenset(FAULT_XIDS))


DEFAULT_POLICY: Final = HealthPolicy()


def decode_throttle(mask: int | None) -> list[str]:
    """Names of the set bits, lowest first; unknown bits as ``Unknown0x...``."""
    if mask is None:
        return []
    names = [name for bit, name in THROTTLE_REASONS if mask & bit]
    known = 0
    for bit, _ in THROTTLE_REASONS:
        known |= bit
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            names.append(f"Unknown{bit:#x}")
            rest &= ~bit
        bit <<= 1
    return names


def device_problems(device: DeviceSample, policy: HealthPolicy = DEFAULT_POLICY) -> list[str]:
    """Why the device is unhealthy; empty when it is healthy."""
    problems: list[str] = []
    if device.lost:
        why = "; ".join(device.errors) if device.errors else "no answer"
        problems.append(f"device lost: {why}")
    if device.ecc_uncorrected:
        problems.append(f"uncorrectable ECC errors since driver load: {device.ecc_uncorrected}")
    rows = device.remapped_rows
    if rows is not None and rows.failed:
        problems.append("row remapping failed: the device needs replacing")
    if rows is not None and rows.pending:
        problems.append("row remapping pending: the device needs a reset")
    throttled = [r for r in decode_throttle(device.throttle_mask) if r in policy.fault_throttle]
    if throttled:
        problems.append("throttled by " + ", ".join(throttled))
    for xid in dict.fromkeys(device.xid_errors):  # once each, in the order first seen
        if xid in policy.fault_xids:
            problems.append(f"XID {xid}: {FAULT_XIDS.get(xid, 'device fault')}")
    return problems


def is_healthy(device: DeviceSample, policy: HealthPolicy = DEFAULT_POLICY) -> bool:
    return not device_problems(device, policy)


def mig_in_use(instance: MigSample, device: DeviceSample) -> bool:
    return bool(instance.allocated_pods) or any(p.gpu_instance_id == instance.gpu_instance_id for p in device.processes)


def is_busy(device: DeviceSample, policy: HealthPolicy = DEFAULT_POLICY) -> bool:
    """A process runs on it, a pod holds it, or its memory is in use beyond the free threshold."""
    if device.processes or device.allocated_pods:
        return True
    if any(mig_in_use(m, device) for m in device.mig_instances):
        return True
    total, used = device.memory_total_bytes, device.memory_used_bytes
    if total and used is not None:
        return used >= policy.free_memory_fraction * total
    # Memory the backend cannot measure (TPU) does not make a device busy; memory it failed to
    # read does: an unknown device is not offered as free.
    return "memoryUsedBytes" not in device.not_supported


def is_free(device: DeviceSample, policy: HealthPolicy = DEFAULT_POLICY) -> bool:
    return is_healthy(device, policy) and not is_busy(device, policy)


def free_memory(device: DeviceSample) -> int:
    if device.memory_total_bytes is None or device.memory_used_bytes is None:
        return 0
    return max(0, device.memory_total_bytes - device.memory_used_bytes)


def unusable_mig_slices(device: DeviceSample) -> int:
    """Slices of a MIG device that cannot be combined into anything larger right now.

    Repartitioning needs every instance of the GPU idle, so on a MIG device with at least one
    busy instance the idle instances' slices and the unallocated slices are stuck at their
    current size. A MIG device with nothing busy can be repartitioned: nothing is stuck.
    """
    if not device.mig_enabled or not device.mig_instances:
        return 0
    busy = [m for m in device.mig_instances if mig_in_use(m, device)]
    if not busy:
        return 0
    idle = sum(m.slices or 0 for m in device.mig_instances if not mig_in_use(m, device))
    allocated = sum(m.slices or 0 for m in device.mig_instances)
    unallocated = max(0, (device.mig_max_slices or allocated) - allocated)
    return idle + unallocated


def fragmentation(devices: Sequence[DeviceSample], policy: HealthPolicy = DEFAULT_POLICY) -> Fragmentation:
    healthy = [d for d in devices if is_healthy(d, policy)]
    free = [d for d in healthy if not is_busy(d, policy)]
    partial = [d for d in healthy if is_busy(d, policy)]
    return Fragmentation(
        total_devices=len(devices),
        free_devices=len(free),
        partially_used_devices=len(partial),
        stranded_memory_bytes=sum(free_memory(d) for d in partial),
        # A whole-node job wants every device, whole: all healthy, all free, none split by MIG.
        whole_node_available=bool(devices) and len(free) == len(devices) and not any(d.mig_enabled for d in devices),
        largest_free_memory_bytes=max((free_memory(d) for d in healthy), default=0),
        unusable_mig_slices=sum(unusable_mig_slices(d) for d in healthy),
    )
