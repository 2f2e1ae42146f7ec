"""The profiling counters (``devices[].profile``): NVML's GPM metrics between two passes on a card
that has GPM, the PCIe throughput counters elsewhere, and no GPM sample left behind."""

from datetime import UTC, datetime

from accel_agent import report
from accel_agent.backends import nvml_errors as errs
from accel_agent.backends.fake import FakeMigInstance, FakeNvml
from accel_agent.backends.nvml import NvmlBackend
from accel_api.enums import ProfileSource

MIB = 1 << 20
NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


class Ticks:
    """A monotonic clock moved by hand: the GPM interval the backend reports."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_gpm_counters_are_read_between_two_passes() -> None:
    nvml, ticks = FakeNvml.h100(2), Ticks()
    backend = NvmlBackend(nvml, monotonic=ticks)
    first = backend.sample()
    assert [d.profile for d in first.devices] == [None, None]  # one sample makes no reading
    assert nvml.gpm_samples_held == 2  # one kept per device, for the next pass
    nvml.set_gpm(
        0,
        sm_active=37.5,
        sm_occupancy=12.0,
        tensor_active=21.0,
        dram_bandwidth=64.0,
        pcie_tx_mib=3.0,
        pcie_rx_mib=1500.0,
        nvlink_tx_mib=10.0,
        nvlink_rx_mib=20.0,
    )
    ticks.now += 15.0

    got = backend.sample().devices[0].profile

    assert got is not None and got.source is ProfileSource.GPM and got.interval_seconds == 15.0
    assert (got.sm_active_percent, got.sm_occupancy_percent) == (37.5, 12.0)
    assert (got.tensor_active_percent, got.dram_bandwidth_percent) == (21.0, 64.0)
    assert (got.pcie_tx_bytes_per_second, got.pcie_rx_bytes_per_second) == (3 * MIB, 1500 * MIB)
    assert (got.nvlink_tx_bytes_per_second, got.nvlink_rx_bytes_per_second) == (10 * MIB, 20 * MIB)
    assert nvml.gpm_samples_held == 2  # the older sample of each device freed
    assert nvml.count("nvmlGpmQueryDeviceSupport") == 2  # asked once per device, not every pass
    backend.close()
    assert nvml.gpm_samples_held == 0


def test_a_metric_the_card_lacks_is_left_empty_and_odd_values_are_bounded() -> None:
    nvml = FakeNvml.h100(1)
    nvml.set_gpm(0, nvlink_tx_mib=None, nvlink_rx_mib=None, sm_active=100.4, pcie_tx_mib=-1.0)
    backend = NvmlBackend(nvml)
    backend.sample()
    got = backend.sample().devices[0].profile
    assert got is not None
    assert got.nvlink_tx_bytes_per_second is None and got.nvlink_rx_bytes_per_second is None
    assert got.sm_active_percent == 100.0 and got.pcie_tx_bytes_per_second == 0


def test_a_card_without_gpm_reports_pcie_throughput() -> None:
    nvml = FakeNvml.h100(1)
    d = nvml.devices[0]
    d.gpm_supported, d.pcie_tx_kib, d.pcie_rx_kib = False, 2048, 512
    backend = NvmlBackend(nvml)
    for _ in range(2):
        got = backend.sample().devices[0].profile
        assert got is not None and got.source is ProfileSource.BASIC
        assert (got.pcie_tx_bytes_per_second, got.pcie_rx_bytes_per_second) == (2048 * 1024, 512 * 1024)
        assert got.sm_active_percent is None and got.interval_seconds is None
    assert nvml.count("nvmlGpmSampleAlloc") == 0 and nvml.count("nvmlGpmQueryDeviceSupport") == 1


def test_no_counters_at_all_is_said_not_supported() -> None:
    nvml = FakeNvml.h100(1)
    d = nvml.devices[0]
    d.gpm_supported = False
    d.unsupported.add("nvmlDeviceGetPcieThroughput")
    got = NvmlBackend(nvml).sample().devices[0]
    assert got.profile is None and "profile" in got.not_supported


def test_a_mig_device_is_not_sampled_through_gpm() -> None:
    nvml = FakeNvml.h100(1)
    d = nvml.devices[0]
    d.mig_mode, d.mig_instances, d.pcie_tx_kib = 1, [FakeMigInstance(1)], 7
    backend = NvmlBackend(nvml)
    backend.sample()
    got = backend.sample().devices[0].profile
    assert got is not None and got.source is ProfileSource.BASIC and got.pcie_tx_bytes_per_second == 7 * 1024
    assert nvml.count("nvmlGpmSampleAlloc") == 0


def test_a_failed_gpm_read_falls_back_for_that_pass_and_leaks_no_sample() -> None:
    nvml = FakeNvml.h100(1)
    nvml.devices[0].pcie_rx_kib = 3
    backend = NvmlBackend(nvml)
    backend.sample()
    nvml.fail_next(errs.UNKNOWN, "nvmlGpmMetricsGet")

    got = backend.sample().devices[0].profile

    assert got is not None and got.source is ProfileSource.BASIC and got.pcie_rx_bytes_per_second == 3 * 1024
    assert nvml.gpm_samples_held == 0  # both the older and this pass's sample freed
    assert backend.sample().devices[0].profile is None  # GPM starts over: one sample again
    assert backend.sample().devices[0].profile is not None
    assert nvml.gpm_samples_held == 1


def test_the_report_carries_the_profile_and_writes_only_for_the_diagnosis_counters() -> None:
    nvml = FakeNvml.h100(1)
    backend = NvmlBackend(nvml, xid_events=False)
    backend.sample()
    nvml.set_gpm(0, sm_active=40.0)
    before = report.build(backend.sample(), node_name="n1", sample_time=NOW)
    wire = before.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert wire["status"]["devices"][0]["profile"]["smActivePercent"] == 40.0
    assert wire["status"]["devices"][0]["profile"]["source"] == "gpm"

    nvml.set_gpm(0, sm_active=45.0, pcie_rx_mib=9000.0)  # bytes move, the SMs barely
    quiet = report.build(backend.sample(), node_name="n1", sample_time=NOW)
    assert report.changes(before, quiet) == []

    nvml.set_gpm(0, sm_active=50.0)  # ten points from the report last written
    moved = report.build(backend.sample(), node_name="n1", sample_time=NOW)
    assert report.changes(before, moved) == ["device 0: sm_active_percent 40.0 -> 50.0"]
