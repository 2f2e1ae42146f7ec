"""The operator's settings: one class, read once from ACCEL_OPERATOR_* variables, passed in."""

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from accel_api.costrollup import ROLLUP_GONE

# The name of an object the operator is told to use: empty (none), or a Kubernetes object name.
_OptionalObjectName = Annotated[str, Field(max_length=253, pattern=r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?)?$")]

# Where the operator's own objects live (the Lease, the webhook's Service, the cost rollup).
_Namespace = Annotated[str, Field(max_length=63)]


class OperatorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ACCEL_OPERATOR_", frozen=True)

    namespaces: list[str] = Field(default_factory=list, description="Watch these namespaces; empty: all.")
    catalog: Path | None = Field(default=None, description="An accelerator catalog YAML overriding the built-in one.")
    liveness_port: int = Field(default=8081, ge=0, le=65535)
    resync_seconds: float = Field(
        default=60.0,
        gt=0,
        le=86_400,
        description="The safety net: every job is decided again this often even without an event.",
    )
    pass_interval_seconds: float = Field(
        default=0.2,
        ge=0,
        le=10,
        description="The least time from one scheduling pass's start to the next: the marks of a burst of events "
        "gather into one pass (each pass also costs in proportion to the jobs it holds). 0: a pass per wake.",
    )
    admitted_status_seconds: float = Field(
        default=30.0,
        ge=0,
        le=600,
        description=(
            "An admission's batch Job records it (its accel.dev/admission annotation) and is created first; the job's "
            "status is written with Running when the pods have their nodes within this long, else Admitted then "
            "(30, the default, takes a status write off most admissions, docs/scale.md; 0: Admitted at once, "
            "before its Job)."
        ),
    )
    waiting_status_seconds: float = Field(
        default=5.0,
        ge=0,
        le=600,
        description=(
            "A new job that waits for capacity has its status (Pending, why) and its Event written once it has "
            "waited this long since its creation, not at once: a job admitted within it writes neither "
            "(docs/scale.md). 0: written at once."
        ),
    )
    bind_timeout_seconds: float = Field(
        default=120.0,
        gt=0,
        le=86_400,
        description="Fixed pools: an admitted gang whose pods do not all get a node this long is released.",
    )
    log_format: Literal["text", "json"] = Field(default="text", description="text for people, json for pipelines.")
    api_threads: int = Field(
        default=16,
        ge=1,
        le=128,
        description="Threads (and pooled connections) for the API calls that apply decisions: status patches, "
        "workloads, events.",
    )
    metrics_port: int = Field(default=8080, ge=0, le=65535, description="Prometheus /metrics; 0: off.")
    metrics_address: str = Field(default="0.0.0.0", max_length=64, description="Bind address of /metrics.")
    lease: str = Field(
        default="",
        max_length=63,
        description="A coordination.k8s.io Lease in lease_namespace that elects one active replica; empty: "
        "this process acts alone (one replica, or tests).",
    )
    lease_namespace: _Namespace = "accel-system"
    lease_seconds: float = Field(default=15.0, ge=3, le=300, description="How long a leader's Lease holds.")
    # The admission webhook (handlers/admission.py): off unless a port is given (the Deployment sets one).
    webhook_port: int = Field(
        default=0, ge=0, le=65535, description="Serve the admission webhooks (TLS) on this port; 0: off."
    )
    webhook_address: str = Field(default="0.0.0.0", max_length=64, description="Bind address of the webhook.")
    webhook_fail_closed: bool = Field(
        default=False,
        description="Register the webhooks with failurePolicy Fail: an operator that cannot answer blocks every "
        "create and update of AcceleratorJobs (see docs/policy.md for the cost); false: Ignore.",
    )
    webhook_host: str = Field(
        default="",
        max_length=253,
        description="Where the API server calls the webhook (https://HOST:PORT), e.g. 127.0.0.1 on a local "
        "control plane; empty: through the Service webhook_service in webhook_namespace.",
    )
    webhook_configuration: _OptionalObjectName = Field(
        default="",
        description="The Validating and MutatingWebhookConfigurations of this name were installed with the "
        "operator (the chart, the manifests): it serves them and, with a self-signed certificate, writes only "
        "their caBundle; empty: the operator creates and manages them itself (named accel.dev).",
    )
    webhook_service: str = Field(default="accel-operator-webhook", max_length=63)
    webhook_namespace: _Namespace = "accel-system"
    webhook_service_port: int = Field(default=443, ge=1, le=65535)
    webhook_cert_dir: Path | None = Field(
        default=None,
        description="tls.crt, tls.key and ca.crt for the webhook (a Secret shared by every replica); "
        "unset or empty: a self-signed certificate (see webhook_tls_secret).",
    )
    webhook_tls_secret: _OptionalObjectName = Field(
        default="",
        description="Without webhook_cert_dir: a Secret in webhook_namespace through which every replica shares "
        "one self-signed webhook certificate (the first replica makes it); empty: one per process.",
    )
    # Rescheduling on what the node agents report (reconcile/nodes/health.py).
    report_stale_seconds: float = Field(
        default=900.0,
        gt=0,
        le=86_400,
        description="A node report whose heartbeat is older than this is stale: nothing is decided on it "
        "(the agent writes at least every 300 s).",
    )
    checkpoint_grace_seconds: float = Field(
        default=120.0,
        ge=0,
        le=3600,
        description="After a checkpoint-now request for a job on a failing device, how long to wait for the "
        "checkpoint before the attempt is ended and the job moved.",
    )
    idle_window_seconds: float = Field(
        default=1800.0, gt=0, le=7 * 86_400, description="Devices near 0% this long: an idle reservation."
    )
    idle_utilization_percent: float = Field(default=5.0, ge=0, le=100, description="'Near 0%' for idleness.")
    hung_window_seconds: float = Field(
        default=600.0,
        gt=0,
        le=7 * 86_400,
        description="Every device of a multi-device job at ~0% this long while its pods run: a hung job.",
    )
    hung_utilization_percent: float = Field(default=1.0, ge=0, le=100, description="'~0%' for a hung job.")
    # Early warnings (each off while unset): docs/rescheduling.md, "Early warnings".
    sqs_queue_url: str = Field(
        default="",
        max_length=1024,
        description="The SQS queue EventBridge fills with EC2 spot interruption, rebalance and state-change "
        "events (the node termination handler's queue mode); empty: not read.",
    )
    sqs_region: str = Field(default="", max_length=32, description="The queue's region; empty: boto3's default.")
    aws_endpoint_url: str = Field(
        default="", max_length=1024, description="An AWS endpoint other than the real one (moto in tests)."
    )
    sqs_wait_seconds: int = Field(default=20, ge=0, le=20, description="SQS long poll per receive.")
    tpu_pools: list[Annotated[str, Field(max_length=253)]] = Field(
        default_factory=list,
        max_length=256,
        description="AcceleratorPools of TPU VMs outside GKE (nodes with providerID gce://<project>/<zone>/<name>) "
        "whose state the TPU API is polled for; empty: not polled.",
    )
    tpu_endpoint: str = Field(
        default="", max_length=1024, description="A TPU API endpoint other than Google's (a stand-in in tests)."
    )
    tpu_poll_seconds: float = Field(default=10.0, ge=1, le=3600, description="How often the TPU API is asked.")
    cost_interval_seconds: float = Field(
        default=30.0, gt=0, le=3600, description="How often the cost ledger accrues (leader only)."
    )
    cost_write_seconds: float = Field(
        default=60.0,
        ge=0,
        le=3600,
        description="A running job's status.cost is written at most this often, and only once its spend moved by "
        "a cent (at once when an attempt ends or a budget is crossed); team spending and metrics follow every "
        "accrual.",
    )
    cost_writes_per_second: float = Field(
        default=5.0,
        gt=0,
        le=1000,
        description="The running jobs' status.cost writes per second on average at most: with more running jobs "
        "than cost_write_seconds x this, each is written less often (the API server's load stays flat).",
    )
    cost_rollup: str = Field(
        default="accel-cost-rollup",
        max_length=253,
        description="The ConfigMap in cost_rollup_namespace that keeps what ended attempts cost after their jobs "
        "are deleted (the cost counters and reports read it); empty: off (the counters drop deleted jobs).",
    )
    cost_rollup_namespace: _Namespace = "accel-system"
    cost_rollup_gone: int = Field(
        default=ROLLUP_GONE,
        ge=1,
        le=ROLLUP_GONE,
        description="Deleted jobs the cost rollup keeps (as digests) so that a lagging view folds none twice, "
        "the oldest dropped first (beyond GONE_KEEP, 6 h, all are); lower only to test the bound.",
    )
    aws_region: str = Field(
        default="", max_length=32, description="Live EC2 spot prices for `price.source: live` pools; empty: off."
    )
    gcp_project: str = Field(
        default="", max_length=64, description="TPU types per zone for `price.source: live` TPU pools; empty: off."
    )
    price_ttl_seconds: float = Field(default=300.0, gt=0, le=86_400, description="How long a live price is kept.")
    # Spot recovery (docs/concepts.md, "The checkpoint contract"): where S3 checkpoints are read, how long a
    # lookup may take, and the window after which a spot job falls back to on-demand pools.
    s3_endpoint_url: str | None = Field(
        default=None, max_length=256, description="S3 endpoint for checkpoint lookups; empty: AWS's own."
    )
    s3_region: str | None = Field(default=None, max_length=64, description="Region of the checkpoint buckets.")
    checkpoint_lookup_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        le=300,
        description="One lookup of a job's latest complete checkpoint, at most: no request starts after it, "
        "and each has a quarter of it to connect and to read, so the lookup's thread ends by 1.5 times it.",
    )
    checkpoint_lookup_max_requests: int = Field(
        default=64,
        ge=2,
        le=10_000,
        description="S3 requests one lookup may make (list pages of 1000 steps and marker checks together); "
        "a prefix that needs more is reported on the job, which waits.",
    )
    spot_fallback_preemptions: int = Field(
        default=3,
        ge=0,
        le=16,
        description="A spot.policy prefer job preempted this often within the window falls back to on-demand; 0: off.",
    )
    spot_fallback_window_seconds: float = Field(default=3600.0, gt=0, le=7 * 86_400)
    plans_kept: int = Field(
        default=4096,
        ge=0,
        le=1_000_000,
        description="Plans the scheduler keeps whole, the ones used last; a waiting job whose plan was let go is "
        "planned again when it is decided (the same plan): memory against CPU.",
    )
