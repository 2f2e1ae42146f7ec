"""Call every NVML function the node agent uses, on device 0, and record how each answered.

Standalone (needs only pynvml): ``python3 agent/gpu_check/nvml_probe.py --output probe.json``.
Each entry says ``ok`` (with a short value), ``not-supported`` or ``error`` (with NVML's error name),
so a new GPU or driver can be checked against the agent's expectations in one run. The function
list mirrors ``accel_agent.backends.nvml.NvmlApi``; a unit test keeps the two in step.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

NOT_SUPPORTED = 3
FUNCTION_NOT_FOUND = 13
TEMPERATURE_GPU = 0
CLOCK_SM = 1
MEMORY_ERROR_TYPE_UNCORRECTED = 1
VOLATILE_ECC = 0
EVENT_TYPE_XID_CRITICAL_ERROR = 0x8
PCIE_UTIL_TX_BYTES = 0
GPM_SM_UTIL = 2

# Every NVML function accel_agent calls (see NvmlApi), in the order the agent calls them.
AGENT_FUNCTIONS: tuple[str, ...] = (
    "nvmlInit",
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetCudaDriverVersion",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetTemperatureV",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetAttributes",
    "nvmlEventSetCreate",
    "nvmlDeviceRegisterEvents",
    "nvmlEventSetWait_v2",
    "nvmlEventSetFree",
    "nvmlDeviceGetPcieThroughput",
    "nvmlGpmQueryDeviceSupport",
    "nvmlGpmSampleAlloc",
    "nvmlGpmSampleGet",
    "nvmlGpmMetricsGet",
    "nvmlGpmSampleFree",
    "nvmlShutdown",
)


def _short(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_short(v) for v in value][:16]
    fields = getattr(value, "_fields_", None)
    if fields:
        return {name: _short(getattr(value, name, None)) for name, *_ in fields}
    if hasattr(value, "__dict__"):
        return {k: _short(v) for k, v in vars(value).items() if not k.startswith("_")}
    return repr(value)[:200]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--output", help="JSON file to write (default: stdout)")
    ap.add_argument("--index", type=int, default=0, help="device index to probe")
    args = ap.parse_args(argv)
    try:
        import pynvml
    except ImportError as exc:
        result: dict[str, Any] = {"error": f"pynvml not importable: {exc}"}
        _emit(result, args.output)
        return 1

    results: dict[str, dict[str, Any]] = {}
    state: dict[str, Any] = {}

    def probe(name: str, call: Callable[[], Any], key: str | None = None) -> Any:
        fn = getattr(pynvml, name, None)
        entry: dict[str, Any]
        if fn is None:
            entry = {"result": "not-in-pynvml"}
            results[key or name] = entry
            return None
        started = time.perf_counter()
        try:
            value = call()
        except pynvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            kind = "not-supported" if code in (NOT_SUPPORTED, FUNCTION_NOT_FOUND) else "error"
            entry = {"result": kind, "error": str(exc), "code": code}
            value = None
        except Exception as exc:  # noqa: BLE001 - a probe records whatever a call does
            entry = {"result": "error", "error": f"{type(exc).__name__}: {exc}"}
            value = None
        else:
            entry = {"result": "ok", "value": _short(value)}
        entry["seconds"] = round(time.perf_counter() - started, 6)
        results[key or name] = entry
        return value

    nv = pynvml
    probe("nvmlInit", nv.nvmlInit)
    probe("nvmlSystemGetDriverVersion", nv.nvmlSystemGetDriverVersion)
    probe("nvmlSystemGetCudaDriverVersion", nv.nvmlSystemGetCudaDriverVersion)
    probe("nvmlDeviceGetCount", nv.nvmlDeviceGetCount)
    h = probe("nvmlDeviceGetHandleByIndex", lambda: nv.nvmlDeviceGetHandleByIndex(args.index))
    if h is not None:
        for name, call in (
            ("nvmlDeviceGetUUID", lambda: nv.nvmlDeviceGetUUID(h)),
            ("nvmlDeviceGetName", lambda: nv.nvmlDeviceGetName(h)),
            ("nvmlDeviceGetPciInfo", lambda: nv.nvmlDeviceGetPciInfo(h).busId),
            ("nvmlDeviceGetMigMode", lambda: nv.nvmlDeviceGetMigMode(h)),
            ("nvmlDeviceGetComputeRunningProcesses", lambda: nv.nvmlDeviceGetComputeRunningProcesses(h)),
            ("nvmlDeviceGetMemoryInfo", lambda: nv.nvmlDeviceGetMemoryInfo(h)),
            ("nvmlDeviceGetUtilizationRates", lambda: nv.nvmlDeviceGetUtilizationRates(h)),
            ("nvmlDeviceGetPowerUsage", lambda: nv.nvmlDeviceGetPowerUsage(h)),
            ("nvmlDeviceGetEnforcedPowerLimit", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h)),
            ("nvmlDeviceGetTemperatureV", lambda: nv.nvmlDeviceGetTemperatureV(h, TEMPERATURE_GPU)),
            ("nvmlDeviceGetTemperature", lambda: nv.nvmlDeviceGetTemperature(h, TEMPERATURE_GPU)),
            ("nvmlDeviceGetClockInfo", lambda: nv.nvmlDeviceGetClockInfo(h, CLOCK_SM)),
            ("nvmlDeviceGetCurrentClocksEventReasons", lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(h)),
            ("nvmlDeviceGetCurrentClocksThrottleReasons", lambda: nv.nvmlDeviceGetCurrentClocksThrottleReasons(h)),
            (
                "nvmlDeviceGetTotalEccErrors",
                lambda: nv.nvmlDeviceGetTotalEccErrors(h, MEMORY_ERROR_TYPE_UNCORRECTED, VOLATILE_ECC),
            ),
            ("nvmlDeviceGetRemappedRows", lambda: nv.nvmlDeviceGetRemappedRows(h)),
            ("nvmlDeviceGetMaxMigDeviceCount", lambda: nv.nvmlDeviceGetMaxMigDeviceCount(h)),
            ("nvmlDeviceGetAttributes", lambda: nv.nvmlDeviceGetAttributes(h)),
        ):
            state[name] = probe(name, call)
        mig_mode = state.get("nvmlDeviceGetMigMode")
        if mig_mode and int(mig_mode[0]) == 1:
            mig = probe("nvmlDeviceGetMigDeviceHandleByIndex", lambda: nv.nvmlDeviceGetMigDeviceHandleByIndex(h, 0))
            if mig is not None:
                probe("nvmlDeviceGetGpuInstanceId", lambda: nv.nvmlDeviceGetGpuInstanceId(mig))
                probe(
                    "nvmlDeviceGetAttributes",
                    lambda: nv.nvmlDeviceGetAttributes(mig),
                    key="nvmlDeviceGetAttributes(mig)",
                )
        else:
            for name in ("nvmlDeviceGetMigDeviceHandleByIndex", "nvmlDeviceGetGpuInstanceId"):
                results[name] = {"result": "skipped", "why": "MIG is disabled on this device"}
        event_set = probe("nvmlEventSetCreate", nv.nvmlEventSetCreate)
        if event_set is not None:
            probe(
                "nvmlDeviceRegisterEvents",
                lambda: nv.nvmlDeviceRegisterEvents(h, EVENT_TYPE_XID_CRITICAL_ERROR, event_set),
            )
            waited = probe("nvmlEventSetWait_v2", lambda: nv.nvmlEventSetWait_v2(event_set, 0))
            if waited is None and results["nvmlEventSetWait_v2"].get("error") == "Timeout":
                results["nvmlEventSetWait_v2"] = {"result": "ok", "value": "timeout (no event pending)"}
            probe("nvmlEventSetFree", lambda: nv.nvmlEventSetFree(event_set))
        probe("nvmlDeviceGetPcieThroughput", lambda: nv.nvmlDeviceGetPcieThroughput(h, PCIE_UTIL_TX_BYTES))
        support = probe("nvmlGpmQueryDeviceSupport", lambda: nv.nvmlGpmQueryDeviceSupport(h))
        if support is not None and int(support.isSupportedDevice):
            first = probe("nvmlGpmSampleAlloc", nv.nvmlGpmSampleAlloc)
            second = nv.nvmlGpmSampleAlloc() if first is not None else None
            if first is not None and second is not None:
                probe("nvmlGpmSampleGet", lambda: nv.nvmlGpmSampleGet(h, first))
                time.sleep(0.1)
                nv.nvmlGpmSampleGet(h, second)

                def metrics() -> Any:
                    request = nv.c_nvmlGpmMetricsGet_t()
                    request.version = nv.NVML_GPM_METRICS_GET_VERSION
                    request.numMetrics = 1
                    request.sample1, request.sample2 = first, second
                    request.metrics[0].metricId = GPM_SM_UTIL
                    got = nv.nvmlGpmMetricsGet(request)
                    return (int(got.metrics[0].nvmlReturn), float(got.metrics[0].value))

                probe("nvmlGpmMetricsGet", metrics)
                probe("nvmlGpmSampleFree", lambda: nv.nvmlGpmSampleFree(first))
                nv.nvmlGpmSampleFree(second)
        else:
            for name in ("nvmlGpmSampleAlloc", "nvmlGpmSampleGet", "nvmlGpmMetricsGet", "nvmlGpmSampleFree"):
                results[name] = {"result": "skipped", "why": "GPM is not supported on this device"}
        # For reference, what the calibration notes found unsupported on a one-GPU VM.
        probe(
            "nvmlDeviceGetNvLinkState", lambda: nv.nvmlDeviceGetNvLinkState(h, 0), key="extra:nvmlDeviceGetNvLinkState"
        )
        probe(
            "nvmlDeviceGetRetiredPages",
            lambda: nv.nvmlDeviceGetRetiredPages(h, 1),
            key="extra:nvmlDeviceGetRetiredPages",
        )
    probe("nvmlShutdown", nv.nvmlShutdown)
    summary = {
        "python": platform.python_version(),
        "pynvml": getattr(pynvml, "__version__", None) or _version("nvidia-ml-py"),
        "device_index": args.index,
        "not_supported": sorted(k for k, v in results.items() if v["result"] == "not-supported"),
        "errors": sorted(k for k, v in results.items() if v["result"] == "error"),
        "calls": results,
    }
    _emit(summary, args.output)
    return 0


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _emit(data: dict[str, Any], path: str | None) -> None:
    text = json.dumps(data, indent=2) + "\n"
    if path:
        with open(path, "w", encoding="utf-8") as f:  # noqa: PTH123 - plain script, no pathlib needed
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    sys.exit(main())
