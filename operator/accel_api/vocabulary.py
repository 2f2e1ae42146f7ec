"""The label, annotation, taint, resource and environment-variable names the product speaks.

Every string that crosses a boundary (Kubernetes objects, the job's container, the clouds) is
named here once, so a grep for a key finds its one definition.
"""

import re
from collections.abc import Iterable
from typing import Final

GROUP: Final = "accel.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"

# --- our own labels and annotations -------------------------------------------------------
LABEL_JOB: Final = f"{GROUP}/job"
LABEL_TEAM: Final = f"{GROUP}/team"
# On a Namespace (set by the platform team): the one team its AcceleratorJobs may name.
LABEL_NAMESPACE_TEAM: Final = LABEL_TEAM
LABEL_POOL: Final = f"{GROUP}/pool"
LABEL_ATTEMPT: Final = f"{GROUP}/attempt"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE: Final = "accel-operator"
# A job may report its progress by annotating its own pod or the AcceleratorJob.
ANNOTATION_JOB_NAME: Final = f"{GROUP}/job-name"  # on workloads and their pods: the AcceleratorJob's whole name
# On an attempt's batch Job: its admission (pool, shape, attempt, admitted time, the plan's figures) as JSON,
# written with the Job before the job's status says Admitted (docs/scale.md, "The batch Job as the admission record").
ANNOTATION_ADMISSION: Final = f"{GROUP}/admission"
ANNOTATION_CHECKPOINT: Final = f"{GROUP}/last-checkpoint"
ANNOTATION_CHECKPOINT_STEP: Final = f"{GROUP}/last-checkpoint-step"
# The operator's request to a running job: "write a checkpoint now" (before a preemption). The
# value is a token (e.g. the time of the request); a job acts once per new non-empty value.
ANNOTATION_CHECKPOINT_NOW: Final = f"{GROUP}/checkpoint-now"
# On an AcceleratorJob: a user sets it to a new value (a timestamp) to resume a job that a policy
# stopped for idleness (phase Stopped). Any value the job has not been stopped with resumes it.
ANNOTATION_RESUME: Final = f"{GROUP}/resume"
# On an AcceleratorJob: a user sets it to a new value (a timestamp) to stop the job (``kubectl accel
# stop``): a running attempt is asked to checkpoint and ended, the job is Stopped until resumed.
ANNOTATION_STOP: Final = f"{GROUP}/stop"
# On the pods of our workloads (set in the batch Job's pod template): the pod's object stays until
# the cost ledger holds its own start and end (docs/cost.md, "When an attempt is charged"), so a pod
# that ended and was deleted while no operator ran (a spot node reclaimed, its pods collected) is
# still read, as the Job controller's batch.kubernetes.io/job-tracking finalizer keeps a pod until
# the Job's status has counted it. The accountant removes it (engine/accountant.py).
FINALIZER_LEDGER: Final = f"{GROUP}/ledger"
# Simulation (the local cluster and the agent's simulated backend), never set in production:
ANNOTATION_SIMULATED: Final = f"{GROUP}/simulated"  # on KWOK nodes made from a pool
ANNOTATION_AUTOSCALED: Final = f"{GROUP}/autoscaled"  # on KWOK nodes the simulated autoscaler made
ANNOTATION_SIM_EXIT_CODE: Final = f"{GROUP}/simulate-exit-code"  # on a pod: end it with this code
ANNOTATION_SIM_UTILIZATION: Final = f"{GROUP}/simulated-utilization"  # pod or node: busy devices' %
ANNOTATION_SIM_MEMORY_FRACTION: Final = f"{GROUP}/simulated-memory-fraction"  # pod or node: memory used
ANNOTATION_SIM_FAULTS: Final = f"{GROUP}/simulated-faults"  # node: e.g. "1=ecc,3=lost"

# --- accelerators -------------------------------------------------------------------------
RESOURCE_NVIDIA_GPU: Final = "nvidia.com/gpu"
RESOURCE_GOOGLE_TPU: Final = "google.com/tpu"
LABEL_GPU_PRODUCT: Final = "nvidia.com/gpu.product"
LABEL_GPU_MEMORY_MIB: Final = "nvidia.com/gpu.memory"
LABEL_GPU_COUNT: Final = "nvidia.com/gpu.count"
LABEL_GPU_PRESENT: Final = "nvidia.com/gpu.present"
LABEL_MIG_STRATEGY: Final = "nvidia.com/mig.strategy"
LABEL_TPU_ACCELERATOR: Final = "cloud.google.com/gke-tpu-accelerator"
LABEL_TPU_TOPOLOGY: Final = "cloud.google.com/gke-tpu-topology"
TAINT_TPU: Final = "google.com/tpu"
TAINT_GPU: Final = "nvidia.com/gpu"

# --- capacity type ------------------------------------------------------------------------
LABEL_KARPENTER_CAPACITY: Final = "karpenter.sh/capacity-type"  # spot | on-demand
LABEL_EKS_CAPACITY: Final = "eks.amazonaws.com/capacityType"  # SPOT | ON_DEMAND
LABEL_GKE_SPOT: Final = "cloud.google.com/gke-spot"  # "true"
LABEL_GKE_PREEMPTIBLE: Final = "cloud.google.com/gke-preemptible"  # "true"
LABEL_ZONE: Final = "topology.kubernetes.io/zone"
LABEL_INSTANCE_TYPE: Final = "node.kubernetes.io/instance-type"

# --- rescheduling on node reports ------------------------------------------------------------
# NoSchedule taint the operator puts on a node whose fresh AcceleratorNodeReport shows a failing
# device (value: the device index), and takes off when a fresh report shows every device healthy.
TAINT_DEVICE_UNHEALTHY: Final = f"{GROUP}/device-unhealthy"

# --- termination signals ------------------------------------------------------------------
TAINT_NTH_SPOT_ITN: Final = "aws-node-termination-handler/spot-itn"
TAINT_NTH_REBALANCE: Final = "aws-node-termination-handler/rebalance-recommendation"
TAINT_NTH_MAINTENANCE: Final = "aws-node-termination-handler/scheduled-maintenance"
TAINT_NTH_ASG: Final = "aws-node-termination-handler/asg-lifecycle-termination"
TAINT_KARPENTER_DISRUPTED: Final = "karpenter.sh/disrupted"
TAINT_KARPENTER_DISRUPTION_OLD: Final = "karpenter.sh/disruption"
TAINT_GKE_IMPENDING_TERMINATION: Final = "cloud.google.com/impending-node-termination"
TAINT_UNREACHABLE: Final = "node.kubernetes.io/unreachable"
TAINT_NOT_READY: Final = "node.kubernetes.io/not-ready"
# The operator's own taint (NoSchedule) on a node a cloud announced it will reclaim: an EC2
# interruption notice from the SQS queue, or a TPU VM the TPU API reports PREEMPTED. Nothing new
# lands there; the value names the notice (an early_warning.WarningSource value).
TAINT_ACCEL_INTERRUPTION: Final = f"{GROUP}/interruption"
TERMINATION_TAINTS: Final = frozenset(
    {
        TAINT_NTH_SPOT_ITN,
        TAINT_NTH_REBALANCE,
        TAINT_NTH_MAINTENANCE,
        TAINT_NTH_ASG,
        TAINT_KARPENTER_DISRUPTED,
        TAINT_KARPENTER_DISRUPTION_OLD,
        TAINT_GKE_IMPENDING_TERMINATION,
        TAINT_ACCEL_INTERRUPTION,
    }
)
CONDITION_DISRUPTION_TARGET: Final = "DisruptionTarget"
DISRUPTION_REASONS: Final = frozenset(
    {
        "PreemptionByScheduler",
        "DeletionByTaintManager",
        "EvictionByEvictionAPI",
        "DeletionByPodGC",
        "TerminationByKubelet",
    }
)
GKE_PREEMPTED_POD_REASONS: Final = frozenset({"Terminated", "NodeShutdown"})

# --- the checkpoint contract: environment variables the job's container receives ----------
ENV_CHECKPOINT_URI: Final = "ACCEL_CHECKPOINT_URI"  # where to write checkpoints
ENV_RESUME_FROM: Final = "ACCEL_RESUME_FROM"  # latest checkpoint to resume from; empty at first
ENV_ATTEMPT: Final = "ACCEL_ATTEMPT"  # 0 on first start, +1 per resume
ENV_CHECKPOINT_INTERVAL_SECONDS: Final = "ACCEL_CHECKPOINT_INTERVAL_SECONDS"
ENV_JOB_NAME: Final = "ACCEL_JOB_NAME"
ENV_TEAM: Final = "ACCEL_TEAM"
ENV_DEVICES: Final = "ACCEL_DEVICES"  # devices in the whole job
ENV_ACCELERATOR: Final = "ACCEL_ACCELERATOR"  # catalog id, e.g. h100-80gb
ENV_NODE_RANK: Final = "ACCEL_NODE_RANK"  # this pod's index in the gang, 0 .. ACCEL_NNODES-1
ENV_NNODES: Final = "ACCEL_NNODES"  # pods in the gang, one per node
ENV_NPROC_PER_NODE: Final = "ACCEL_NPROC_PER_NODE"  # devices per pod (torchrun --nproc-per-node)
# A pvc:// checkpoint (pvc://<claim>/<path>): the claim's <path> is mounted here on every attempt's
# pods (read-write, the same directory each time); ACCEL_CHECKPOINT_DIR names it and
# ACCEL_RESUME_FROM_DIR the step directory ACCEL_RESUME_FROM points at, under it.
CHECKPOINT_MOUNT_DIR: Final = "/mnt/accel-checkpoint"
ENV_CHECKPOINT_DIR: Final = "ACCEL_CHECKPOINT_DIR"
ENV_RESUME_FROM_DIR: Final = "ACCEL_RESUME_FROM_DIR"
# A downward-API volume projects the pod's annotations into this file (read-only): the operator's
# requests to the running job (e.g. "checkpoint now" before a preemption) arrive as annotations.
POD_ANNOTATIONS_DIR: Final = "/etc/accel"
POD_ANNOTATIONS_FILE: Final = f"{POD_ANNOTATIONS_DIR}/annotations"
# The layout under ACCEL_CHECKPOINT_URI (docs/concepts.md, "The checkpoint contract"): checkpoint N is the
# directory (or S3 prefix) <uri>/step-<N>/; its data objects are written first and the empty
# marker <uri>/step-<N>/COMPLETE last. A step without its marker is never resumed from.
CHECKPOINT_STEP_PREFIX: Final = "step-"
CHECKPOINT_MARKER: Final = "COMPLETE"

# Multi-host TPU (libtpu reads them); reserved, like the device-visibility names below.
ENV_TPU_WORKER_ID: Final = "TPU_WORKER_ID"  # multi-host TPU: this host's index in the slice
ENV_TPU_WORKER_HOSTNAMES: Final = "TPU_WORKER_HOSTNAMES"  # multi-host TPU: every host, comma-separated

# --- rendezvous: torch.distributed's names, set by the operator but NOT reserved -------------
# Conventions of launchers rather than the operator's contract (launchers disagree on what
# WORLD_SIZE counts), so a tenant's spec.env value replaces the operator's. The contract's own
# copies (ACCEL_NODE_RANK, ACCEL_NNODES, ACCEL_DEVICES) are reserved and always present.
RDZV_MASTER_ADDR: Final = "MASTER_ADDR"  # <workload>-0.<service>: the rank-0 pod (one node: 127.0.0.1)
RDZV_MASTER_PORT: Final = "MASTER_PORT"
RDZV_WORLD_SIZE: Final = "WORLD_SIZE"  # devices in the whole job
RDZV_NODE_RANK: Final = "NODE_RANK"
RENDEZVOUS_ENV: Final = (RDZV_MASTER_ADDR, RDZV_MASTER_PORT, RDZV_WORLD_SIZE, RDZV_NODE_RANK)
RENDEZVOUS_PORT: Final = 29500  # torch.distributed's default; a gang's headless Service names it
RENDEZVOUS_PORT_NAME: Final = "rendezvous"
# Set by the Job controller on every pod of an Indexed Job (read through the downward API).
ANNOTATION_JOB_COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"

# --- reserved environment: names a tenant may not set in spec.env ---------------------------
# One definition, read by the API validation, the CRD pattern and the workload builder. A name
# ending in "*" reserves every name with that prefix. Why each one:
RESERVED_ENV: Final = (
    # The operator's contract (checkpoint URI, attempt, devices, ...): a tenant value would lie
    # to the job about where to resume or how many devices it has.
    "ACCEL_*",
    # The NVIDIA container runtime reads these when it starts the container: they choose which
    # GPUs are mounted and which driver capabilities are exposed. Set by a tenant they can reach
    # devices the scheduler did not allocate (escaping the device plugin), or skip the runtime's
    # driver/CUDA compatibility checks.
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "NVIDIA_REQUIRE_*",
    "NVIDIA_DISABLE_REQUIRE",
    "NVIDIA_MIG_*",
    # Device visibility inside the process: renumbering or hiding devices breaks the devices /
    # ranks contract the planner priced and the agent attributes usage with.
    "CUDA_VISIBLE_DEVICES",
    "TPU_VISIBLE_CHIPS",
    ENV_TPU_WORKER_ID,
    ENV_TPU_WORKER_HOSTNAMES,
    # The dynamic loader: replaces the host driver libraries the runtime injects (libcuda,
    # libnvidia-ml) or preloads code into every process, including hooks the operator adds.
    "LD_*",
)
# NCCL_* is deliberately NOT reserved: tenants legitimately tune and debug NCCL (NCCL_DEBUG,
# NCCL_IB_HCA, NCCL_SOCKET_IFNAME) and none of it crosses the container boundary. A platform
# that pins NCCL settings per pool adds them through AcceleratorPolicy.spec.reservedEnv.


def _env_matches(name: str, entry: str) -> bool:
    return name.startswith(entry[:-1]) if entry.endswith("*") else name == entry


def is_reserved_env(name: str, extra: Iterable[str] = ()) -> bool:
    """Whether a container may not receive ``name`` from a tenant (``extra``: a policy's additions,
    in the same notation: an exact name or a ``PREFIX_*``)."""
    return any(_env_matches(name, entry) for entry in (*RESERVED_ENV, *extra))


def reserved_env_regex(entries: Iterable[str] = RESERVED_ENV) -> str:
    """An anchored regular expression (RE2- and ECMA-compatible) matching every reserved name."""
    alternatives = [re.escape(e[:-1]) + ".*" if e.endswith("*") else re.escape(e) for e in entries]
    return "^(" + "|".join(alternatives) + ")$"
