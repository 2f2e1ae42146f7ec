"""The one place where NVML's errors are sorted into what the agent does about them.

pynvml raises ``NVMLError`` subclasses carrying NVML's numeric return code (and, for unversioned
functions missing from an old driver, ``NVMLLibraryMismatchError``). The sampler never looks at a
code itself: it asks :func:`classify`, so "Not Supported is a fact, GPU_IS_LOST is a fault, a
missing library makes the node unhealthy" is decided here once. Codes are NVML's (nvml.h) and are
stable across driver versions, so they are spelled out rather than read from pynvml, which keeps
this module importable where pynvml is not installed.
"""

from enum import StrEnum
from typing import Final


class Fault(StrEnum):
    NOT_SUPPORTED = "not-supported"  # the device/driver cannot answer: list the field, carry on
    DEVICE_LOST = "device-lost"  # this device is gone or needs a reset: unhealthy device
    DRIVER = "driver"  # NVML itself is unusable (library, driver, init): unhealthy node, re-init later
    NOT_FOUND = "not-found"  # the thing asked about vanished between two calls (a process ended)
    TRANSIENT = "transient"  # try again next pass (timeout, busy, out of memory in the driver)
    OTHER = "other"  # record it, leave the field empty


UNINITIALIZED: Final = 1
INVALID_ARGUMENT: Final = 2
NOT_SUPPORTED: Final = 3
NO_PERMISSION: Final = 4
NOT_FOUND: Final = 6
DRIVER_NOT_LOADED: Final = 9
TIMEOUT: Final = 10
LIBRARY_NOT_FOUND: Final = 12
FUNCTION_NOT_FOUND: Final = 13
CORRUPTED_INFOROM: Final = 14
GPU_IS_LOST: Final = 15
RESET_REQUIRED: Final = 16
LIB_RM_VERSION_MISMATCH: Final = 18
IN_USE: Final = 19
MEMORY: Final = 20
NO_DATA: Final = 21
NOT_READY: Final = 27
GPU_NOT_FOUND: Final = 28
UNKNOWN: Final = 999

_BY_CODE: Final[dict[int, Fault]] = {
    NOT_SUPPORTED: Fault.NOT_SUPPORTED,
    # A function the installed driver does not export is, for the agent, not supported there.
    FUNCTION_NOT_FOUND: Fault.NOT_SUPPORTED,
    GPU_IS_LOST: Fault.DEVICE_LOST,
    RESET_REQUIRED: Fault.DEVICE_LOST,
    GPU_NOT_FOUND: Fault.DEVICE_LOST,
    UNINITIALIZED: Fault.DRIVER,
    DRIVER_NOT_LOADED: Fault.DRIVER,
    LIBRARY_NOT_FOUND: Fault.DRIVER,
    LIB_RM_VERSION_MISMATCH: Fault.DRIVER,
    NOT_FOUND: Fault.NOT_FOUND,
    TIMEOUT: Fault.TRANSIENT,
    IN_USE: Fault.TRANSIENT,
    MEMORY: Fault.TRANSIENT,
    NO_DATA: Fault.TRANSIENT,
    NOT_READY: Fault.TRANSIENT,
}

_NAMES: Final[dict[int, str]] = {
    UNINITIALIZED: "Uninitialized",
    INVALID_ARGUMENT: "InvalidArgument",
    NOT_SUPPORTED: "NotSupported",
    NO_PERMISSION: "NoPermission",
    NOT_FOUND: "NotFound",
    DRIVER_NOT_LOADED: "DriverNotLoaded",
    TIMEOUT: "Timeout",
    LIBRARY_NOT_FOUND: "LibraryNotFound",
    FUNCTION_NOT_FOUND: "FunctionNotFound",
    CORRUPTED_INFOROM: "CorruptedInforom",
    GPU_IS_LOST: "GpuIsLost",
    RESET_REQUIRED: "ResetRequired",
    LIB_RM_VERSION_MISMATCH: "LibRmVersionMismatch",
    IN_USE: "InUse",
    MEMORY: "Memory",
    NO_DATA: "NoData",
    NOT_READY: "NotReady",
    GPU_NOT_FOUND: "GpuNotFound",
    UNKNOWN: "Unknown",
}


def code_of(exc: BaseException) -> int | None:
    """NVML's return code carried by a pynvml error; None for anything else."""
    value = getattr(exc, "value", None)
    if isinstance(value, int) and type(exc).__name__.startswith("NVMLError"):
        return value
    if type(exc).__name__ == "NVMLLibraryMismatchError":
        return FUNCTION_NOT_FOUND
    return None


def is_nvml_error(exc: BaseException) -> bool:
    return code_of(exc) is not None


def classify(exc: BaseException) -> Fault:
    code = code_of(exc)
    if code is None:
        return Fault.OTHER
    return _BY_CODE.get(code, Fault.OTHER)


def name_of(exc: BaseException) -> str:
    """A short, stable name for metrics labels and reports (``NotSupported``, ``GpuIsLost``)."""
    code = code_of(exc)
    if code is None:
        return type(exc).__name__
    return name_of_code(code)


def name_of_code(code: int) -> str:
    return _NAMES.get(code, f"Code{code}")
