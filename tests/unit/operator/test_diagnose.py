"""The ``top`` diagnosis: its rules at their boundaries, the basic counters of a card without GPM,
and the counters a real H100 gave for an input-starved, a compute-bound and a memory-bound loop
(tests/data/gpm, measured by bench/gpu/measure_gpm.py through the agent's own NVML backend)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from accel_api.enums import ProfileSource
from accel_api.nodereport import DeviceProfile
from accel_operator.accounting import accrual
from accel_operator.reconcile.nodes import diagnose as dg
from accel_operator.reconcile.nodes.diagnose import Counters, Verdict, diagnose

DATA = Path(__file__).resolve().parents[2] / "data" / "gpm"
GB = 1e9


def gpm(sm: float, tensor: float = 0.0, dram: float = 0.0, pcie: float = 0.0, nvlink: float = 0.0) -> Counters:
    return Counters(gpm=True, sm=sm, tensor=tensor, dram=dram, pcie=pcie, nvlink=nvlink)


@pytest.mark.parametrize(
    ("counters", "verdict"),
    [
        (gpm(0.0), Verdict.IDLE),
        (gpm(dg.IDLE_PERCENT), Verdict.IDLE),  # the accountant's bound, inclusive
        (gpm(dg.IDLE_PERCENT + 0.1), Verdict.INPUT_BOUND),
        (gpm(dg.SM_LOW - 0.1, tensor=5), Verdict.INPUT_BOUND),
        (gpm(dg.SM_LOW), Verdict.COMPUTE_BOUND),  # DCGM: under 0.5 is ineffective; 0.5 is not under
        (gpm(97, tensor=80), Verdict.COMPUTE_BOUND),
        # links: at the threshold, with tensor cores quiet
        (gpm(40, tensor=5, nvlink=dg.NVLINK_HIGH), Verdict.COMMUNICATION_BOUND),
        (gpm(40, tensor=5, nvlink=dg.NVLINK_HIGH - 1), Verdict.INPUT_BOUND),
        (gpm(70, tensor=5, pcie=dg.PCIE_HIGH), Verdict.COMMUNICATION_BOUND),
        (gpm(70, tensor=dg.TENSOR_LOW - 0.1, pcie=dg.PCIE_HIGH), Verdict.COMMUNICATION_BOUND),
        # busy tensor cores: the traffic overlaps compute, which is what limits the step
        (gpm(90, tensor=dg.TENSOR_LOW, nvlink=200 * GB), Verdict.COMPUTE_BOUND),
        # memory: at the threshold, tensor quiet; links come first
        (gpm(98, tensor=0, dram=dg.DRAM_HIGH), Verdict.MEMORY_BOUND),
        (gpm(98, tensor=0, dram=dg.DRAM_HIGH - 0.1), Verdict.COMPUTE_BOUND),
        (gpm(98, tensor=30, dram=90), Verdict.COMPUTE_BOUND),
        (gpm(98, tensor=0, dram=90, nvlink=100 * GB), Verdict.COMMUNICATION_BOUND),
        (gpm(20, tensor=0, dram=dg.DRAM_HIGH), Verdict.MEMORY_BOUND),
    ],
)
def test_rules_at_their_boundaries(counters: Counters, verdict: Verdict) -> None:
    assert diagnose([counters]).verdict is verdict


def test_nothing_measured_is_unknown_not_idle() -> None:
    assert diagnose([]).verdict is Verdict.UNKNOWN
    assert diagnose([Counters(gpm=False)]).verdict is Verdict.UNKNOWN


def test_the_line_gives_the_numbers() -> None:
    line = diagnose([gpm(12.3, tensor=4.0, pcie=0.2 * GB), gpm(8.0, tensor=2.0, pcie=0.0)]).line
    assert line == (
        "input-bound: SMs active 10%, tensor cores 3.0%, PCIe 0.1 GB/s, NVLink 0.0 GB/s on 2 devices: "
        "the devices wait between steps (data loading or host work)"
    )
    assert diagnose([gpm(0.5)]).line.startswith("idle: SMs active 0.5% on 1 device: ")
    comm = diagnose([gpm(30, tensor=2, nvlink=120 * GB, pcie=9 * GB)]).line
    assert comm.startswith("communication-bound: NVLink 120.0 GB/s, PCIe 9.0 GB/s one way, tensor cores 2.0%")


def test_several_devices_are_judged_on_their_mean() -> None:
    # one busy device and three waiting ones: the job as a whole waits
    devices = [gpm(96, tensor=80), gpm(2), gpm(2), gpm(2)]
    assert diagnose(devices).verdict is Verdict.INPUT_BOUND
    assert diagnose(devices).line.startswith("input-bound: SMs active 26%, tensor cores 20%")


def test_basic_counters_without_gpm() -> None:
    basic = DeviceProfile(source=ProfileSource.BASIC, pcie_tx_bytes_per_second=10**9, pcie_rx_bytes_per_second=3)
    c = Counters.of(basic, 35.0, 4.0)
    assert c == Counters(gpm=False, sm=35.0, dram=4.0, pcie=1e9)
    found = diagnose([c])
    assert found.verdict is Verdict.INPUT_BOUND
    assert found.line.startswith("input-bound: utilization 35%, PCIe 1.0 GB/s")
    assert found.line.endswith("(basic counters: this card has no GPM, so utilization is the time a kernel ran)")
    # no tensor figure: heavy PCIe counts as the bottleneck only while kernels run under SM_HIGH of the time
    assert diagnose([Counters(gpm=False, sm=70, pcie=9 * GB)]).verdict is Verdict.COMMUNICATION_BOUND
    assert diagnose([Counters(gpm=False, sm=dg.SM_HIGH, pcie=9 * GB)]).verdict is Verdict.COMPUTE_BOUND
    assert diagnose([Counters.of(None, 0.0, 0.0)]).verdict is Verdict.IDLE
    # a GPM profile without its SM figure is read as basic
    assert Counters.of(DeviceProfile(source=ProfileSource.GPM), 50.0, None).gpm is False


def test_a_mix_of_gpm_and_basic_cards_uses_the_basic_figures() -> None:
    mixed = [gpm(90, tensor=80), Counters(gpm=False, sm=10.0)]
    assert dg.mean(mixed) == Counters(gpm=False, sm=10.0)


def test_idle_is_the_accountants_idle() -> None:
    assert dg.IDLE_PERCENT == accrual.IDLE_PERCENT


def _phase(rows: list[dict[str, Any]], phase: str) -> list[Counters]:
    steady = [r for r in rows if r["phase"] == phase and r["steady"] and r["profile"]]
    return [Counters.of(DeviceProfile.model_validate(r["profile"]), r["utilization_gpu_percent"], None) for r in steady]


@pytest.fixture(scope="module")
def h100() -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (DATA / "h100-samples.jsonl").read_text().splitlines()]
    assert {r["card"] for r in rows} == {"NVIDIA H100 80GB HBM3"}
    return rows


@pytest.mark.parametrize(
    ("phase", "verdict"),
    [
        ("idle", Verdict.IDLE),
        ("starved", Verdict.INPUT_BOUND),
        ("compute", Verdict.COMPUTE_BOUND),
        ("memory", Verdict.MEMORY_BOUND),
    ],
)
def test_the_h100_loops_are_diagnosed_as_what_they_were(
    h100: list[dict[str, Any]], phase: str, verdict: Verdict
) -> None:
    samples = _phase(h100, phase)
    assert len(samples) >= 3
    assert diagnose(samples).verdict is verdict  # the phase as a whole
    # and every one-second sample once the loop runs: from the second after the one its first
    # step fell in (the seconds before are the model being built: the device is idle then)
    running = 0
    if phase != "idle":
        running = next(i for i, c in enumerate(samples) if c.sm is not None and c.sm > dg.IDLE_PERCENT) + 1
    assert {diagnose([c]).verdict for c in samples[running:]} == {verdict}


def test_the_h100_figures_sit_far_from_the_thresholds(h100: list[dict[str, Any]]) -> None:
    """The thresholds were not fitted to these runs: each measured median clears its bound by a margin."""
    starved = [c for c in _phase(h100, "starved") if c.sm and c.sm > dg.IDLE_PERCENT]
    compute = [c for c in _phase(h100, "compute") if c.sm and c.sm > dg.SM_LOW]
    assert max(c.sm or 0 for c in starved) < dg.SM_LOW / 4  # about 7% active
    assert max(c.tensor or 0 for c in starved) < dg.TENSOR_LOW / 2  # about 5%
    assert min(c.tensor or 0 for c in compute) > dg.TENSOR_LOW * 3  # about 80%
    assert min(c.sm or 0 for c in compute) > dg.SM_HIGH  # about 96%
