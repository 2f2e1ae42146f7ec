"""The real NVML backend against the fake NVML: every field, Not Supported, lost devices, ended
processes, a missing library, a driver that goes away."""

from dataclasses import fields

import pytest

from accel_agent.backends import DeviceSample, NodeSample
from accel_agent.backends import nvml_errors as errs
from accel_agent.backends.fake import FakeDevice, FakeHandle, FakeMigInstance, FakeNvml, FakeProcess
from accel_agent.backends.nvml import NvmlApi, NvmlBackend
from accel_api.enums import AcceleratorKind, AgentBackend

GIB = 1 << 30


def sample(nvml: FakeNvml, backend: NvmlBackend | None = None) -> NodeSample:
    return (backend or NvmlBackend(nvml)).sample()


def test_the_fake_implements_every_call_of_the_port() -> None:
    api: NvmlApi = FakeNvml()  # mypy checks the shape; this checks nothing was left out at runtime
    wanted = {n for n in dir(NvmlApi) if n.startswith("nvml")}
    assert wanted <= set(dir(api))


def test_every_field_is_read(nvml: FakeNvml) -> None:
    d = nvml.devices[0]
    d.util_gpu, d.util_memory = 97, 41
    d.processes = [FakeProcess(4242, 30 * GIB), FakeProcess(77, None)]
    d.base_memory_used_bytes = GIB
    d.power_mw, d.power_limit_mw = 512_345, 700_000
    d.temperature_c, d.sm_clock_mhz, d.throttle_mask = 61, 1980, 0x4
    d.ecc_uncorrected = 2
    d.remapped_rows = (3, 1, 1, 0)

    s = sample(nvml)

    assert s.available and s.backend is AgentBackend.NVML and s.accelerator_kind is AcceleratorKind.GPU
    assert (s.driver_version, s.cuda_driver_version) == ("580.159.04", "13.0")
    got = s.devices[0]
    assert got.index == 0 and got.uuid == d.uuid and got.name == "NVIDIA H100 80GB HBM3"
    assert got.pci_bus_id == "00000000:18:00.0"
    assert got.memory_total_bytes == d.memory_total_bytes and got.memory_used_bytes == 31 * GIB
    assert (got.utilization_gpu_percent, got.utilization_memory_percent) == (97.0, 41.0)
    assert (got.power_watts, got.power_limit_watts) == (512.345, 700.0)
    assert (got.temperature_celsius, got.sm_clock_mhz, got.throttle_mask) == (61.0, 1980, 0x4)
    assert got.ecc_uncorrected == 2
    assert got.remapped_rows is not None
    assert (got.remapped_rows.correctable, got.remapped_rows.uncorrectable) == (3, 1)
    assert got.remapped_rows.pending and not got.remapped_rows.failed
    assert got.mig_enabled is False and got.mig_instances == ()
    assert [(p.pid, p.used_memory_bytes, p.gpu_instance_id) for p in got.processes] == [
        (77, None, None),
        (4242, 30 * GIB, None),
    ]
    assert got.not_supported == () and got.errors == () and not got.lost
    assert s.devices[1].index == 1 and s.devices[1].processes == ()


# (NVML function answering Not Supported, report fields listed, attribute left None)
NOT_SUPPORTED_CASES = [
    ("nvmlDeviceGetUtilizationRates", ("utilizationGpuPercent", "utilizationMemoryPercent"), "utilization_gpu_percent"),
    ("nvmlDeviceGetMemoryInfo", ("memoryTotalBytes", "memoryUsedBytes"), "memory_used_bytes"),
    ("nvmlDeviceGetPowerUsage", ("powerWatts",), "power_watts"),
    ("nvmlDeviceGetEnforcedPowerLimit", ("powerLimitWatts",), "power_limit_watts"),
    ("nvmlDeviceGetClockInfo", ("smClockMhz",), "sm_clock_mhz"),
    ("nvmlDeviceGetTotalEccErrors", ("eccUncorrected",), "ecc_uncorrected"),
    ("nvmlDeviceGetRemappedRows", ("remappedRows",), "remapped_rows"),
    ("nvmlDeviceGetMigMode", ("migEnabled",), "mig_enabled"),
    ("nvmlDeviceGetComputeRunningProcesses", ("processes",), None),
    ("nvmlDeviceGetPciInfo", ("pciBusId",), "pci_bus_id"),
]


@pytest.mark.parametrize(("function", "listed", "attribute"), NOT_SUPPORTED_CASES)
def test_not_supported_is_listed_and_the_pass_goes_on(
    nvml: FakeNvml, function: str, listed: tuple[str, ...], attribute: str | None
) -> None:
    nvml.devices[0].unsupported.add(function)
    s = sample(nvml)
    d = s.devices[0]
    assert d.not_supported == listed
    if attribute is not None:
        assert getattr(d, attribute) is None
    assert d.errors == () and not d.lost
    assert d.temperature_celsius == 30.0  # later fields were still read
    assert s.devices[1].not_supported == ()
    assert function in s.unsupported_calls
    assert not s.call_errors  # "not supported" is an answer, not a failure


@pytest.mark.parametrize(
    ("unsupported", "expected"),
    [
        ({"nvmlDeviceGetTemperatureV"}, 30.0),  # older driver: falls back to the deprecated call
        ({"nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"}, None),
    ],
)
def test_temperature_falls_back_to_the_older_call(
    nvml: FakeNvml, unsupported: set[str], expected: float | None
) -> None:
    nvml.devices[0].unsupported |= unsupported
    nvml.fail_next(errs.FUNCTION_NOT_FOUND, "nvmlDeviceGetTemperatureV")
    d = sample(nvml).devices[0]
    assert d.temperature_celsius == expected
    assert ("temperatureCelsius" in d.not_supported) is (expected is None)


def test_throttle_reasons_fall_back_when_pynvml_lacks_the_new_name(nvml: FakeNvml) -> None:
    class OldPynvml(FakeNvml):
        nvmlDeviceGetCurrentClocksEventReasons = None  # type: ignore[assignment]  # noqa: N815 - pynvml's name

    old = OldPynvml([FakeDevice(uuid="GPU-old", throttle_mask=0x40)])
    d = NvmlBackend(old).sample().devices[0]  # type: ignore[arg-type]  # an old pynvml lacks it, on purpose
    assert d.throttle_mask == 0x40
    assert old.count("nvmlDeviceGetCurrentClocksThrottleReasons") == 1


@pytest.mark.parametrize(
    ("code", "expect_lost", "expect_error"),
    [
        (errs.GPU_IS_LOST, True, None),
        (errs.RESET_REQUIRED, True, None),
        (errs.NO_PERMISSION, False, "powerWatts: nvmlDeviceGetPowerUsage failed: NoPermission"),
        (errs.UNKNOWN, False, "powerWatts: nvmlDeviceGetPowerUsage failed: Unknown"),
        (errs.TIMEOUT, False, "powerWatts: nvmlDeviceGetPowerUsage failed: Timeout"),
    ],
)
def test_a_failing_call_is_sorted_by_its_error(
    nvml: FakeNvml, code: int, expect_lost: bool, expect_error: str | None
) -> None:
    nvml.fail_next(code, "nvmlDeviceGetPowerUsage")
    s = sample(nvml)
    d = s.devices[0]
    assert d.lost is expect_lost
    if expect_error is not None:
        assert d.errors == (expect_error,)
        assert d.power_watts is None and d.temperature_celsius == 30.0
    assert s.devices[1].lost is False and s.available
    assert [(e.function, e.error) for e in s.call_errors] == [("nvmlDeviceGetPowerUsage", errs.name_of_code(code))]


def test_a_lost_device_keeps_its_identity(nvml: FakeNvml) -> None:
    backend = NvmlBackend(nvml)
    first = backend.sample()
    nvml.lose_device(1)
    lost = backend.sample().devices[1]
    assert lost.lost and lost.uuid == first.devices[1].uuid and lost.name == first.devices[1].name
    assert "GpuIsLost" in lost.errors[-1]


def test_a_device_that_disappears_from_the_count_is_reported_lost(nvml: FakeNvml) -> None:
    backend = NvmlBackend(nvml)
    before = backend.sample()
    gone = nvml.remove_device(0)
    after = backend.sample()
    assert len(after.devices) == 2
    present, missing = after.devices[0], after.devices[1]
    assert present.uuid == before.devices[1].uuid and present.index == 0 and not present.lost
    assert missing.uuid == gone.uuid and missing.lost and missing.index == 0
    assert "no longer enumerated" in missing.errors[0]


def test_a_process_that_ends_between_two_calls(nvml: FakeNvml) -> None:
    d = nvml.devices[0]
    d.processes = [FakeProcess(10, 20 * GIB), FakeProcess(11, 4 * GIB)]
    # The process list is read, then the process exits before the memory is read.
    nvml.after_call("nvmlDeviceGetComputeRunningProcesses", lambda: nvml.end_process(10))
    s = sample(nvml)
    got = s.devices[0]
    assert [p.pid for p in got.processes] == [10, 11]  # as listed: it was there when asked
    assert got.memory_used_bytes == 4 * GIB  # memory already freed
    assert got.errors == () and s.available
    # The next pass no longer shows it.
    assert [p.pid for p in sample(nvml).devices[0].processes] == [11]


def test_processes_ending_while_mig_instances_are_read(nvml: FakeNvml) -> None:
    d = nvml.devices[0]
    d.mig_mode = 1
    d.mig_instances = [FakeMigInstance(1, "3g.40gb", 3, 40192), FakeMigInstance(2, "1g.10gb", 1, 9856)]
    d.processes = [FakeProcess(5, GIB, gpu_instance_id=1), FakeProcess(6, GIB, gpu_instance_id=2)]
    nvml.after_call("nvmlDeviceGetMigDeviceHandleByIndex", lambda: nvml.end_process(6))
    got = sample(nvml).devices[0]
    assert got.mig_enabled and got.mig_max_slices == 7
    assert [(m.gpu_instance_id, m.profile, m.slices) for m in got.mig_instances] == [
        (1, "3g.40gb", 3),
        (2, "1g.10gb", 1),
    ]
    assert [(p.pid, p.gpu_instance_id) for p in got.processes] == [(5, 1)]
    assert "utilizationGpuPercent" in got.not_supported  # NVML cannot attribute it on MIG
    assert got.mig_instances[0].uuid is not None and got.mig_instances[0].memory_bytes == 40192 << 20
    asked = [args[0] for name, args in nvml.calls if name == "nvmlDeviceGetComputeRunningProcesses"]
    assert FakeHandle(d.uuid) not in asked  # per instance, never the MIG parent
    assert FakeHandle(d.uuid, 1) in asked and FakeHandle(d.uuid, 2) in asked


@pytest.mark.parametrize(
    ("setup", "problem"),
    [
        ("library_missing", "NVML library not found"),
        ("driver_not_loaded", "NVIDIA driver not loaded"),
    ],
)
def test_no_library_or_driver_gives_an_unavailable_sample(nvml: FakeNvml, setup: str, problem: str) -> None:
    if setup == "library_missing":
        nvml.library_missing = True
    else:
        nvml.driver_loaded = False
    s = sample(nvml)
    assert not s.available and s.devices == ()
    assert problem in s.problems[0]


def test_no_driver_gives_an_unavailable_sample() -> None:
    # The real pynvml on a machine without an NVIDIA driver (this one, and CI's).
    s = NvmlBackend().sample()
    assert not s.available and "NVML" in s.problems[0], s.problems


def test_the_driver_going_away_mid_run_and_coming_back(nvml: FakeNvml) -> None:
    backend = NvmlBackend(nvml)
    assert backend.sample().available
    nvml.driver_loaded = False
    gone = backend.sample()
    assert not gone.available and "DriverNotLoaded" in "".join(e.error for e in gone.call_errors)
    nvml.driver_loaded = True
    back = backend.sample()
    assert back.available and len(back.devices) == 2
    assert nvml.count("nvmlInit") == 2  # initialized again


def test_init_failure_then_retry(nvml: FakeNvml) -> None:
    backend = NvmlBackend(nvml)
    nvml.fail_next(errs.UNKNOWN, "nvmlInit")
    first = backend.sample()
    assert not first.available and "Unknown" in first.problems[0]
    assert backend.sample().available


def test_xid_events_are_collected_per_device(nvml: FakeNvml) -> None:
    backend = NvmlBackend(nvml)
    backend.sample()  # registers the devices
    nvml.inject_xid(1, 79)
    nvml.inject_xid(1, 13)
    s = backend.sample()
    assert s.devices[0].xid_errors == ()
    assert s.devices[1].xid_errors == (79, 13)
    assert backend.sample().devices[1].xid_errors == (79, 13)  # remembered since the agent started
    assert not s.call_errors  # the wait's Timeout ("no event") is not an error


def test_xid_events_not_supported(nvml: FakeNvml) -> None:
    nvml.events_supported = False
    s = sample(nvml)
    assert s.available and "xidErrors" in s.not_supported


def test_close_shuts_nvml_down(nvml: FakeNvml) -> None:
    backend = NvmlBackend(nvml)
    backend.sample()
    backend.close()
    assert nvml.count("nvmlShutdown") == 1 and nvml.count("nvmlEventSetFree") == 1 and not nvml.initialized


def test_sample_counts_calls(nvml: FakeNvml) -> None:
    s = sample(nvml)
    assert s.calls == len(nvml.calls)


def test_device_sample_fields_all_reach_the_fake_path(nvml: FakeNvml) -> None:
    """Guard: a new DeviceSample field must be read by the backend or listed here on purpose."""
    not_from_nvml = {"allocated_pods", "xid_errors", "lost", "errors", "not_supported", "mig_max_slices"}
    backend = NvmlBackend(nvml)
    backend.sample()  # a GPM reading is the difference of two samples: the profile comes on the second pass
    d = backend.sample().devices[0]
    unread = [f.name for f in fields(DeviceSample) if getattr(d, f.name) is None and f.name not in not_from_nvml]
    assert unread == []


def test_a_device_nvml_cannot_open_is_not_offered(nvml: FakeNvml) -> None:
    nvml.fail_next(errs.NO_PERMISSION, "nvmlDeviceGetHandleByIndex")
    d = sample(nvml).devices[0]
    assert d.lost and "NoPermission" in d.errors[-1]
