"""Enumerations used across the CRDs. Values are the exact strings that appear in YAML."""

from enum import StrEnum


class AcceleratorKind(StrEnum):
    GPU = "gpu"
    TPU = "tpu"


class WorkloadMode(StrEnum):
    TRAINING = "training"
    INFERENCE = "inference"


class Precision(StrEnum):
    """Numeric recipe. ``amp-*``: fp32 master weights with autocast; ``bf16``/``fp16``: pure."""

    AMP_BF16 = "amp-bf16"
    AMP_FP16 = "amp-fp16"
    BF16 = "bf16"
    FP16 = "fp16"
    FP32 = "fp32"
    FP8 = "fp8"  # FP8 matrix products (Transformer Engine) with bf16 elsewhere; needs FP8 tensor cores


class Optimizer(StrEnum):
    ADAMW = "adamw"
    SGD = "sgd"  # with momentum
    ADAFACTOR = "adafactor"
    ADAMW_8BIT = "adamw-8bit"


class Sharding(StrEnum):
    NONE = "none"
    ZERO1 = "zero1"
    ZERO2 = "zero2"
    ZERO3 = "zero3"
    FSDP = "fsdp"


class Framework(StrEnum):
    """The training code whose memory and speed the planner models (see planning/frameworks.py)."""

    HF = "hf"  # Hugging Face transformers in eager PyTorch under autocast
    FSDP = "fsdp"  # PyTorch FSDP/FSDP2 with a mixed-precision policy, fused attention
    DEEPSPEED = "deepspeed"  # DeepSpeed ZeRO stages 1-3 with its mixed-precision accounting
    MEGATRON = "megatron"  # Megatron-LM / NeMo / Transformer Engine
    MAXTEXT = "maxtext"  # JAX/XLA (MaxText): compiled steps, remat policies


class Recompute(StrEnum):
    """Activation recomputation: ``selective`` recomputes attention's core (Korthikanti et al. 2022)."""

    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"


class LossKernel(StrEnum):
    """How the loss is computed over the vocabulary: ``standard`` materialises the [tokens × vocab]
    logits (and fp32 copies and their gradient); ``chunked`` computes them a chunk of tokens at a
    time (Liger Kernel's fused linear cross-entropy); ``fused`` never writes them to memory (Cut
    Cross-Entropy, Wijmans et al. 2024)."""

    STANDARD = "standard"
    CHUNKED = "chunked"
    FUSED = "fused"


class OptimizerOffload(StrEnum):
    """Where the optimizer states and fp32 master weights live: ``cpu`` is ZeRO-Offload (Ren et al.
    2021): host memory, with the optimizer step run by the CPU."""

    NONE = "none"
    CPU = "cpu"


class AdapterMethod(StrEnum):
    """Parameter-efficient fine-tuning: ``lora`` (Hu et al. 2021) trains low-rank adapters beside a
    frozen 16-bit base; ``qlora`` (Dettmers et al. 2023) the same beside a quantised base."""

    LORA = "lora"
    QLORA = "qlora"


class AdapterTargets(StrEnum):
    """The base's linear layers that get an adapter: ``attention`` (query, key, value, output
    projections), ``mlp`` (the MLP's), ``all-linear`` (both; never the LM head)."""

    ATTENTION = "attention"
    MLP = "mlp"
    ALL_LINEAR = "all-linear"


class BaseWeights(StrEnum):
    """How an adapter's frozen base is stored: ``bf16``, ``int8`` (bitsandbytes LLM.int8) or
    ``nf4`` (QLoRA's 4-bit NormalFloat)."""

    BF16 = "bf16"
    INT8 = "int8"
    NF4 = "nf4"


class MlpKind(StrEnum):
    SWIGLU = "swiglu"
    GELU = "gelu"


class Attention(StrEnum):
    """``sdpa``/``flash`` never materialise the s×s scores; ``eager`` does."""

    SDPA = "sdpa"
    FLASH = "flash"
    EAGER = "eager"


class Objective(StrEnum):
    COST = "cost"
    TIME = "time"


class SpotPolicy(StrEnum):
    NEVER = "never"
    PREFER = "prefer"
    REQUIRE = "require"


class CapacityType(StrEnum):
    SPOT = "spot"
    ON_DEMAND = "on-demand"


class PoolScaling(StrEnum):
    FIXED = "fixed"  # capacity is the nodes that exist
    AUTOSCALED = "autoscaled"  # nodes appear for pending pods up to maxNodes (Karpenter, cluster autoscaler)


class FailureKind(StrEnum):
    FAILURE = "Failure"  # the program failed on a healthy node: counts against spec.maxRetries
    PREEMPTION = "Preemption"  # the capacity went away: counts against spec.spot.maxPreemptions


class Provider(StrEnum):
    AWS = "aws"
    GCP = "gcp"
    ONPREM = "onprem"


class PriceSource(StrEnum):
    STATIC = "static"  # the pool's own numbers, or the catalog's defaults
    LIVE = "live"  # the cloud's price API through an adapter


class JobPhase(StrEnum):
    PENDING = "Pending"  # accepted, not planned yet
    UNSCHEDULABLE = "Unschedulable"  # no pool can run it as asked; reasons in status.plan
    ADMITTED = "Admitted"  # devices reserved all-or-nothing, workload being created
    RUNNING = "Running"
    PREEMPTED = "Preempted"  # lost its capacity; a resume decision follows
    STOPPED = "Stopped"  # stopped for idleness by a policy; resumes when a user sets accel.dev/resume
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class BudgetPeriod(StrEnum):
    DAILY = "daily"
    WEEKLY = "weekly"
    MONTHLY = "monthly"


class IdleAction(StrEnum):
    """What an AcceleratorPolicy does with a job whose devices sat idle for its window."""

    WARN = "warn"  # a condition and an event, nothing more
    STOP = "stop"  # checkpoint now, then end the attempt: the job is Stopped until a user resumes it


class BudgetAction(StrEnum):
    """What a job of a team whose budget is spent gets: it waits (queue) or is refused."""

    QUEUE = "queue"
    REFUSE = "refuse"


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class TolerationOperator(StrEnum):
    EXISTS = "Exists"
    EQUAL = "Equal"


class ProfileSource(StrEnum):
    """Where a device's profiling counters (``AcceleratorNodeReport`` ``devices[].profile``) came from."""

    GPM = "gpm"  # NVML's GPU Performance Monitoring (Hopper and newer): SM, tensor, DRAM, PCIe, NVLink
    BASIC = "basic"  # older cards: NVML's PCIe throughput beside the device's utilization and memory


class AgentBackend(StrEnum):
    NVML = "nvml"
    SIMULATED = "simulated"
    TPU = "tpu"
    NONE = "none"
