"""Every size and range limit of the API, in one place, each with the reason for its value.

The models use these numbers as pydantic constraints, so the same limit is enforced by
``accelctl validate``, by the operator when it parses an object, and by the API server through
the generated CRDs (``maxLength``, ``maxItems``, ``maxProperties``, ``minimum``/``maximum``).

Spec limits are chosen so that the largest valid AcceleratorJob spec stays far below the 256 KiB
that kopf can keep in its last-handled-configuration annotation (about 160 KiB at worst, almost
all of it ``command``/``args``/``env``), and so that every number the planner derives from a spec
stays finite (parameters × tokens × 6 FLOPs ≤ 1e14 × 1e15 × 6, far below float's 1.8e308).

Status limits are enforced by *clipping*, not by refusing: the operator and the agent build the
status through these models, and a report that is too long is cut (with a marker) instead of
failing the status write.
"""

import math
from collections.abc import Callable
from typing import Annotated, Any, Final

from pydantic import BeforeValidator, Field

# --- text -----------------------------------------------------------------------------------
DNS_LABEL_LENGTH: Final = 63  # Kubernetes: a label value, a namespace, a team
DNS_SUBDOMAIN_LENGTH: Final = 253  # Kubernetes: an object name (pools), a node name
LABEL_KEY_LENGTH: Final = 317  # Kubernetes: prefix (253) + "/" + name (63)
SHORT_TEXT_LENGTH: Final = 128  # ids, regions, zones, instance types, enum-like text
IMAGE_LENGTH: Final = 512  # OCI reference: repository (255) + tag (128) + digest (71)
ARG_LENGTH: Final = 512  # one element of command/args
ENV_NAME_LENGTH: Final = 128
ENV_VALUE_LENGTH: Final = 1024  # larger configuration belongs in a ConfigMap or a file
URI_LENGTH: Final = 1024  # an S3 key is at most 1024 bytes
DURATION_LENGTH: Final = 32  # "2d12h30m" needs 8; room for "1.5h" style decimals
TIME_LENGTH: Final = 64  # RFC 3339 timestamps
MESSAGE_LENGTH: Final = 1024  # status explanations (reasons, messages, problems), clipped
UID_LENGTH: Final = 36  # a Kubernetes UID (RFC 4122 text); static pods' config hash is 32 hex

# --- lists and maps -------------------------------------------------------------------------
COMMAND_ITEMS: Final = 32
ARGS_ITEMS: Final = 128
ENV_ITEMS: Final = 64
SELECTOR_ITEMS: Final = 32  # node selector entries, tolerations
NAME_LIST_ITEMS: Final = 64  # pools or accelerator ids a job names
POLICY_ITEMS: Final = 256  # budgets, pool access rules, teams/pools per rule
RESERVED_ENV_ITEMS: Final = 64  # names a policy adds to the reserved environment
# checkpointAccess: rules, prefixes per rule, and a prefix's length (a bucket of 63 and a path). Each
# prefix carries a CEL rule, whose cost the API server estimates over every item: 256 rules of 16
# prefixes of 1024 characters were 3.5 times its budget; 64 of 16 of 256 are well within it.
CHECKPOINT_ACCESS_ITEMS: Final = 64
CHECKPOINT_PREFIX_ITEMS: Final = 16
CHECKPOINT_PREFIX_LENGTH: Final = 256
CONDITIONS_ITEMS: Final = 16
STATUS_ALTERNATIVES: Final = 20  # status.plan.alternatives: one per pool, the best first
STATUS_LEFT_OUT_REASONS: Final = 8  # status.plan.leftOut.byReason: the largest first; the count holds all
STATUS_LEFT_OUT_SAMPLE: Final = 5  # pool names shown per reason in status.plan.leftOut (the count says how many)
STATUS_PREEMPTION_TIMES: Final = 16  # status.spot.recentPreemptions: enough for any fallback window rule
STATUS_LEFT_POOLS: Final = 16  # status.spot.leftPools: spot pools a job left; past it, on-demand
STATUS_PROBLEMS: Final = 32  # problems/notSupported/throttle reasons in a node report
STATUS_DEVICES: Final = 64  # devices on one node (the largest servers have 16)
STATUS_PROCESSES: Final = 256  # processes shown per device
STATUS_XIDS: Final = 64  # XID errors kept per device, the latest
STATUS_MIG: Final = 16  # MIG instances per device (an A100/H100 has at most 7)

# --- numbers (all finite: ApiModel refuses NaN and ±infinity) ----------------------------
LAYERS: Final = 1000  # the largest published decoders have ~130
HIDDEN: Final = 131_072  # 2 × 65536; the largest published models use 16384-25600
HEADS: Final = 1024
INTERMEDIATE: Final = 1_048_576  # 8 × the largest hidden
VOCAB: Final = 4_194_304  # 2^22; the largest tokenizers use ~256k
POSITIONS: Final = 4_194_304  # 2^22 tokens of context
PARAMETERS: Final = 10**14  # 100 T parameters
TOKENS: Final = 10**15  # a quadrillion tokens: 60× today's largest training runs
BATCH: Final = 65_536  # sequences per device (micro-batch) or concurrent (inference)
TENSOR_PARALLEL: Final = 64  # within one node, so at most devicesPerNode
DEVICES: Final = 65_536  # devices in one job
NODES: Final = 65_536  # nodes in one job or pool
DEVICES_PER_NODE: Final = 64
PREEMPTIONS: Final = 1000  # preemptions a job tolerates before it fails
CHECKPOINT_MINUTES_MIN: Final = 1
CHECKPOINT_MINUTES_MAX: Final = 10_080  # one week
IDLE_MINUTES_MIN: Final = 5  # an idle-stop window: below the agent's sampling, quiet is noise
IDLE_MINUTES_MAX: Final = 43_200  # thirty days
RESUME_TOKEN_LENGTH: Final = 63  # the accel.dev/resume annotation's value as the operator keeps it
DEADLINE_SECONDS_MAX: Final = 365 * 86_400  # one year
# The planning horizon: a placement expected to run longer than this is not schedulable (the
# planner says so in a sentence, and the operator never admits it). As long as the longest
# deadline a job may set; real training runs take days to a few months.
PLANNING_HORIZON_SECONDS: Final = DEADLINE_SECONDS_MAX
# Time arithmetic on an estimate (now + expected seconds) is clamped to this: datetime ends in
# the year 9999, and an estimate may be up to STATUS_SECONDS_MAX (1e15 s), so an unclamped sum
# raises OverflowError and would stop every scheduling pass.
TIMEDELTA_SECONDS_MAX: Final = 100 * 365 * 86_400  # a century
USD_MAX: Final = 1e9  # a job's maxCost or a team's budget per period
PRICE_MAX: Final = 1000.0  # USD per device-hour; list prices are $0.2-$15
PREEMPTION_RATE_MAX: Final = 60.0  # per node-hour: one a minute is already useless capacity
RESTART_SECONDS_MAX: Final = 86_400.0
CONSOLIDATION_MOVES_PER_HOUR: Final = 100  # jobs moved to defragment a pool, per hour, cluster-wide
STATUS_USD_MAX: Final = 1e15  # money in status (spent, lost, estimated)
STATUS_SECONDS_MAX: Final = 1e15  # durations in status (30 million years)
STATUS_COUNT_MAX: Final = 2**31 - 1  # counters in status (preemptions, nodes, attempts)
BYTES_MAX: Final = 2**60  # memory sizes in status (an exbibyte)
# metadata.generation is an int64, but 2**63 - 1 does not survive the API server's float parse of a schema bound.
GENERATION_MAX: Final = 2**53
PID_MAX: Final = 4_194_304  # Linux pid_max upper limit
PERCENT_MAX: Final = 100.0
WATTS_MAX: Final = 100_000.0
CELSIUS_MIN: Final = -273.0
CELSIUS_MAX: Final = 1000.0
MHZ_MAX: Final = 100_000
XID_MAX: Final = 1_000_000
GPU_INSTANCE_ID_MAX: Final = 1024
RATE_MAX: Final = 1e15  # tokens per second and other rates in status


# --- clipping for status values ---------------------------------------------------------------
def _clip_text(limit: int) -> Callable[[Any], Any]:
    def clip(value: Any) -> Any:
        if isinstance(value, str) and len(value) > limit:
            return value[: limit - 1] + "…"
        return value

    return clip


def keep_first(limit: int) -> Callable[[Any], Any]:
    """A before-validator that keeps the first ``limit`` items of a list."""

    def cap(value: Any) -> Any:
        return list(value[:limit]) if isinstance(value, list | tuple) and len(value) > limit else value

    return cap


def keep_last(limit: int) -> Callable[[Any], Any]:
    """A before-validator that keeps the last ``limit`` items of a list (the latest)."""

    def cap(value: Any) -> Any:
        return list(value[-limit:]) if isinstance(value, list | tuple) and len(value) > limit else value

    return cap


def _estimate(limit: float) -> Callable[[Any], Any]:
    """A status estimate that is not finite or beyond ``limit`` is unknown (null), not an error."""

    def check(value: Any) -> Any:
        if isinstance(value, int | float) and not (math.isfinite(value) and value <= limit):
            return None
        return value

    return check


def clip_message(text: str) -> str:
    """``text`` cut to MESSAGE_LENGTH (with a trailing "…"), for status messages built by hand."""
    clipped: str = _clip_text(MESSAGE_LENGTH)(text)
    return clipped


# A status explanation: cut to MESSAGE_LENGTH with a trailing "…".
Message = Annotated[str, BeforeValidator(_clip_text(MESSAGE_LENGTH)), Field(max_length=MESSAGE_LENGTH)]
# An optional status estimate: non-finite or beyond the limit becomes null (unknown).
StatusSeconds = Annotated[
    Annotated[float, Field(ge=0, le=STATUS_SECONDS_MAX)] | None, BeforeValidator(_estimate(STATUS_SECONDS_MAX))
]
StatusUsd = Annotated[
    Annotated[float, Field(ge=0, le=STATUS_USD_MAX)] | None, BeforeValidator(_estimate(STATUS_USD_MAX))
]
StatusRate = Annotated[Annotated[float, Field(ge=0, le=RATE_MAX)] | None, BeforeValidator(_estimate(RATE_MAX))]
Count = Annotated[int, Field(ge=0, le=STATUS_COUNT_MAX)]
PRIORITY_MAX: Final = 1_000_000  # the PriorityClass range (user classes: up to 1e9) scaled down
RETRIES_MAX: Final = 100  # a job that failed 100 times needs a person, not a retry
SCALE_UP_TIMEOUT_MAX: Final = 86_400.0  # a day; cloud capacity that takes longer is not coming
EXIT_CODE_MIN: Final = -(2**31)
EXIT_CODE_MAX: Final = 2**31 - 1
Bytes = Annotated[int, Field(ge=0, le=BYTES_MAX)]
Generation = Annotated[int, Field(ge=0, le=GENERATION_MAX)]
Percent = Annotated[float, Field(ge=0, le=PERCENT_MAX)]
ShortText = Annotated[str, Field(max_length=SHORT_TEXT_LENGTH)]
ObjectName = Annotated[str, Field(max_length=DNS_SUBDOMAIN_LENGTH)]
Time = Annotated[str, Field(max_length=TIME_LENGTH)]
# A pod's UID as the node agent reads it from a process's cgroup path: lower-case hex and dashes.
Uid = Annotated[str, Field(min_length=32, max_length=UID_LENGTH, pattern=r"^[0-9a-f-]+$")]

# --- parallelism and model shape (planner) --------------------------------------------------
PIPELINE_PARALLEL: Final = 1000  # at most one stage per layer (LAYERS)
CONTEXT_PARALLEL: Final = 1024  # ring attention over 1024 devices already splits 4M tokens in 4k
GRADIENT_ACCUMULATION: Final = 65_536  # micro-batches per optimizer step
HEAD_DIM: Final = 4096  # published models use 64-256
EXPERTS: Final = 4096  # published mixtures of experts use 8-384
LORA_RANK: Final = 1024  # LoRA and QLoRA recipes use 4-256; past 1024 the adapter is a full fine-tune
LORA_ALPHA: Final = 65_536.0  # the scaling alpha/rank; recipes use alpha = rank or 2 × rank
LINK_BYTES_PER_SECOND_MAX: Final = 1e13  # 10 TB/s per device, above any NVLink or network today
