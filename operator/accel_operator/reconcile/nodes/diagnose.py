"""Why a job's devices are not busy, in one line, from the profiling counters its node agents report.

Pure: :func:`diagnose` takes the counters of the job's devices (:class:`Counters`, one per device,
built from a report's ``devices[]`` by :meth:`Counters.of`) and returns a :class:`Diagnosis`: a
verdict and a sentence with the numbers. ``kubectl accel top`` prints it; nothing decides on it.

The verdict is the first of these that holds, over the devices' mean counters:

1. **idle** — SMs active (GPM) or a kernel running (basic counters) at most
   :data:`IDLE_PERCENT` of the time: the accountant's own bound for an idle device.
2. **communication-bound** — NVLink or PCIe traffic at least :data:`NVLINK_HIGH` /
   :data:`PCIE_HIGH` bytes a second in one direction while tensor cores are under
   :data:`TENSOR_LOW` (basic counters: while the SMs are under :data:`SM_HIGH`).
3. **memory-bandwidth-bound** — DRAM bandwidth at least :data:`DRAM_HIGH` while tensor cores are
   under :data:`TENSOR_LOW`.
4. **input-bound** — SMs active under :data:`SM_LOW` with the links and memory quiet (rules 2 and 3
   did not hold): the devices wait between steps for data or host work.
5. **compute-bound** — otherwise: SMs active :data:`SM_LOW` or more.

Where the thresholds come from (docs/agent.md has the table and the measurements):

- SM activity: NVIDIA's DCGM user guide, profiling metrics: "A value of 0.8 or greater is
  necessary, but not sufficient, for effective use of the GPU. A value less than 0.5 likely
  indicates ineffective GPU usage." Hence :data:`SM_LOW` = 50 and :data:`SM_HIGH` = 80.
- DRAM bandwidth: the same guide says that in practice about 0.8 (80%) of the DRAM peak is the
  most a workload achieves; :data:`DRAM_HIGH` = 60 is three quarters of that.
- PCIe: the guide gives 985 MB/s a lane for PCIe Gen3 (15.8 GB/s for x16); :data:`PCIE_HIGH` is
  half of that, a quarter of Gen4 x16 and an eighth of Gen5 x16.
- NVLink: 25 GB/s a link and direction (the guide, Gen2; H100's NVLink 4 has 18 such links, 450
  GB/s a direction); :data:`NVLINK_HIGH` = 50 GB/s, two links' worth.
- Tensor activity: :data:`TENSOR_LOW` = 20 sits between what the loops of
  ``bench/gpu/measure_gpm.py`` measured on an H100 80GB HBM3 (tests/data/gpm/, one-second GPM
  readings, medians): the input-starved loop 6.6% SM active, 4.9% tensor, 3.3% DRAM; the
  compute-bound loop 96.5% SM, 80.4% tensor, 32% DRAM; the memory-copy loop 98% SM, 0% tensor,
  88.7% DRAM. The other thresholds were set from the DCGM guide before those runs, not fitted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from statistics import fmean
from typing import Final

from accel_api.enums import ProfileSource
from accel_api.nodereport import DeviceProfile

IDLE_PERCENT: Final = 1.0  # = accounting.accrual.IDLE_PERCENT (a unit test keeps them equal)
SM_LOW: Final = 50.0  # DCGM: under 0.5 SM activity "likely indicates ineffective GPU usage"
SM_HIGH: Final = 80.0  # DCGM: 0.8 or more is "necessary, but not sufficient, for effective use"
DRAM_HIGH: Final = 60.0  # three quarters of DCGM's practical DRAM peak (~80%)
TENSOR_LOW: Final = 20.0
PCIE_HIGH: Final = 8e9  # bytes/s one way: half of PCIe Gen3 x16 (DCGM: 985 MB/s a lane)
NVLINK_HIGH: Final = 50e9  # bytes/s one way: two NVLink links (DCGM: 25 GB/s a link and direction)


class Verdict(StrEnum):
    IDLE = "idle"
    INPUT_BOUND = "input-bound"
    COMMUNICATION_BOUND = "communication-bound"
    MEMORY_BOUND = "memory-bandwidth-bound"
    COMPUTE_BOUND = "compute-bound"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Counters:
    """One device's counters as the diagnosis reads them; ``None``: not measured.

    ``gpm``: the SM/tensor/DRAM figures are GPM's (SM activity, tensor activity, DRAM bandwidth);
    otherwise ``sm`` is NVML's utilization (the time a kernel ran) and ``dram`` its memory
    utilization (the time memory was read or written), both coarser."""

    gpm: bool
    sm: float | None = None
    tensor: float | None = None
    dram: float | None = None
    pcie: float | None = None  # bytes/s, the busier direction
    nvlink: float | None = None  # bytes/s, the busier direction

    @classmethod
    def of(
        cls, profile: DeviceProfile | None, utilization_gpu: float | None, utilization_memory: float | None
    ) -> Counters:
        """From a report's device: its ``profile`` and its NVML utilization figures."""
        if profile is not None and profile.source is ProfileSource.GPM and profile.sm_active_percent is not None:
            return cls(
                gpm=True,
                sm=profile.sm_active_percent,
                tensor=profile.tensor_active_percent,
                dram=profile.dram_bandwidth_percent,
                pcie=_busier(profile.pcie_tx_bytes_per_second, profile.pcie_rx_bytes_per_second),
                nvlink=_busier(profile.nvlink_tx_bytes_per_second, profile.nvlink_rx_bytes_per_second),
            )
        pcie = _busier(profile.pcie_tx_bytes_per_second, profile.pcie_rx_bytes_per_second) if profile else None
        return cls(gpm=False, sm=utilization_gpu, dram=utilization_memory, pcie=pcie)


@dataclass(frozen=True, slots=True)
class Diagnosis:
    verdict: Verdict
    line: str


def _busier(tx: int | None, rx: int | None) -> float | None:
    known = [float(x) for x in (tx, rx) if x is not None]
    return max(known) if known else None


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return fmean(known) if known else None


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}%" if value >= 10 else f"{value:.1f}%"


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 1e9:.1f} GB/s"


def mean(devices: Sequence[Counters]) -> Counters | None:
    """The devices' mean counters; GPM only when every device had GPM (else the basic figures)."""
    if not devices:
        return None
    if all(d.gpm for d in devices):
        return Counters(
            gpm=True,
            sm=_mean([d.sm for d in devices]),
            tensor=_mean([d.tensor for d in devices]),
            dram=_mean([d.dram for d in devices]),
            pcie=_mean([d.pcie for d in devices]),
            nvlink=_mean([d.nvlink for d in devices]),
        )
    basic = [d for d in devices if not d.gpm]
    return Counters(
        gpm=False,
        sm=_mean([d.sm for d in basic]),
        dram=_mean([d.dram for d in basic]),
        pcie=_mean([d.pcie for d in basic]),
    )


def diagnose(devices: Sequence[Counters]) -> Diagnosis:
    """The one-line reason the devices are (not) busy; see the module docstring for the rules."""
    c = mean(devices)
    if c is None or c.sm is None:
        return Diagnosis(Verdict.UNKNOWN, "no profiling counters reported for these devices yet")
    n = len(devices)
    where = f"{n} device{'s' if n != 1 else ''}"
    basis = "" if c.gpm else " (basic counters: this card has no GPM, so utilization is the time a kernel ran)"
    sm_name = "SMs active" if c.gpm else "utilization"
    if c.sm <= IDLE_PERCENT:
        return Diagnosis(Verdict.IDLE, f"idle: {sm_name} {_pct(c.sm)} on {where}: nothing runs on the devices{basis}")
    quiet_tensor = c.tensor < TENSOR_LOW if c.tensor is not None else c.sm < SM_HIGH
    links = [
        (name, rate)
        for name, rate, high in (("NVLink", c.nvlink, NVLINK_HIGH), ("PCIe", c.pcie, PCIE_HIGH))
        if rate is not None and rate >= high
    ]
    tensor = f", tensor cores {_pct(c.tensor)}" if c.tensor is not None else ""
    if links and quiet_tensor:
        traffic = ", ".join(f"{name} {_rate(rate)}" for name, rate in links)
        return Diagnosis(
            Verdict.COMMUNICATION_BOUND,
            f"communication-bound: {traffic} one way{tensor}, {sm_name} {_pct(c.sm)} on {where}: "
            f"the steps wait on data exchanged between devices{basis}",
        )
    if c.dram is not None and c.dram >= DRAM_HIGH and quiet_tensor:
        memory = "DRAM bandwidth" if c.gpm else "memory busy"
        return Diagnosis(
            Verdict.MEMORY_BOUND,
            f"memory-bandwidth-bound: {memory} {_pct(c.dram)}{tensor}, {sm_name} {_pct(c.sm)} on {where}{basis}",
        )
    if c.sm < SM_LOW:
        return Diagnosis(
            Verdict.INPUT_BOUND,
            f"input-bound: {sm_name} {_pct(c.sm)}{tensor}, PCIe {_rate(c.pcie)}, NVLink {_rate(c.nvlink)} on "
            f"{where}: the devices wait between steps (data loading or host work){basis}",
        )
    return Diagnosis(
        Verdict.COMPUTE_BOUND,
        f"compute-bound: {sm_name} {_pct(c.sm)}{tensor}"
        + (f", DRAM bandwidth {_pct(c.dram)}" if c.gpm and c.dram is not None else "")
        + f" on {where}{basis}",
    )
