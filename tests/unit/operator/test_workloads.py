"""The workload builder: one attempt of a plan as an Indexed Job and a headless Service; the
fake workload client; reading which podFailurePolicy rule ended a Job."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest
from kubernetes import client

from accel_api import vocabulary as v
from accel_api.job import AcceleratorJobSpec, EnvVar
from accel_api.pool import AcceleratorPoolSpec
from accel_operator.adapters.kube import workloads
from accel_operator.adapters.kube.client import ClusterUnavailable
from accel_operator.adapters.kube.workloads import (
    MAX_NAME_LENGTH,
    RULE_DISRUPTION,
    RULE_EXIT_CODE,
    FakeWorkloadClient,
    KubeWorkloadClient,
    ReservedEnv,
    UnbuildableWorkload,
    WorkloadConflict,
    WorkloadSpec,
    build,
    workload_name,
)
from tests.support.builders import accel, job

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
UID = "5f0c2a8e-1111-2222-3333-444455556666"

H100_POOL = AcceleratorPoolSpec.model_validate(
    {
        "provider": "aws",
        "accelerator": "h100-80gb",
        "devicesPerNode": 8,
        "capacityType": "spot",
        "maxNodes": 8,
        "nodeSelector": {v.LABEL_KARPENTER_CAPACITY: "spot", v.LABEL_GPU_PRODUCT: "NVIDIA-H100-80GB-HBM3"},
        "tolerations": [{"key": v.TAINT_GPU, "operator": "Exists", "effect": "NoSchedule"}],
    }
)
BARE_POOL = AcceleratorPoolSpec.model_validate({"provider": "onprem", "accelerator": "h100-80gb", "devicesPerNode": 8})
TPU_POOL = AcceleratorPoolSpec.model_validate(
    {
        "provider": "gcp",
        "accelerator": "tpu-v5e",
        "devicesPerNode": 4,
        "tpuTopology": "4x4",
        "maxNodes": 16,
        "nodeSelector": {v.LABEL_TPU_ACCELERATOR: "tpu-v5-lite-podslice", v.LABEL_TPU_TOPOLOGY: "4x4"},
    }
)


def spec(
    spec: AcceleratorJobSpec | None = None,
    *,
    name: str = "llama",
    pool: AcceleratorPoolSpec = H100_POOL,
    pool_name: str = "h100-spot",
    accelerator: str = "h100-80gb",
    devices: int = 1,
    nodes: int = 1,
    attempt: int = 0,
    resume_from: str | None = None,
) -> WorkloadSpec:
    return WorkloadSpec(
        job_name=name,
        namespace="ml",
        job_uid=UID,
        spec=spec or job().spec(),
        attempt=attempt,
        pool_name=pool_name,
        pool=pool,
        accelerator=accel(accelerator),
        devices=devices,
        nodes=nodes,
        resume_from=resume_from,
    )


def pod_of(j: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = j["spec"]["template"]["spec"]
    return pod


def env_of(j: dict[str, Any]) -> dict[str, Any]:
    """name -> value (or the fieldRef path); fails on a duplicate name."""
    out: dict[str, Any] = {}
    for e in pod_of(j)["containers"][0]["env"]:
        assert e["name"] not in out, f"duplicate env {e['name']}"
        out[e["name"]] = e["value"] if "value" in e else e["valueFrom"]["fieldRef"]["fieldPath"]
    return out


INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"

# name, WorkloadSpec, expected: resource per pod, nodeSelector, env subset, env names absent
CASES = [
    (
        "single-gpu",
        spec(devices=1, nodes=1),
        {v.RESOURCE_NVIDIA_GPU: "1"},
        dict(H100_POOL.node_selector),
        {
            v.ENV_DEVICES: "1",
            v.ENV_NNODES: "1",
            v.ENV_NPROC_PER_NODE: "1",
            v.RDZV_WORLD_SIZE: "1",
            v.RDZV_MASTER_ADDR: "127.0.0.1",  # one node: rank 0 is the pod itself
            v.RDZV_MASTER_PORT: "29500",
            v.ENV_RESUME_FROM: "",
            v.ENV_ACCELERATOR: "h100-80gb",
        },
        {v.ENV_TPU_WORKER_ID, v.ENV_TPU_WORKER_HOSTNAMES, v.ENV_CHECKPOINT_URI},
    ),
    (
        "gpu-gang-2x8",
        spec(job().checkpoint(minutes=15).spec(), devices=16, nodes=2, attempt=3, resume_from="s3://ckpt/job/step-9"),
        {v.RESOURCE_NVIDIA_GPU: "8"},
        dict(H100_POOL.node_selector),
        {
            v.ENV_ATTEMPT: "3",
            v.ENV_DEVICES: "16",
            v.ENV_NNODES: "2",
            v.ENV_NPROC_PER_NODE: "8",
            v.RDZV_WORLD_SIZE: "16",
            v.ENV_NODE_RANK: INDEX,
            v.RDZV_NODE_RANK: INDEX,
            v.RDZV_MASTER_ADDR: "llama-a3-0.llama-a3",
            v.ENV_CHECKPOINT_URI: "s3://ckpt/job",
            v.ENV_CHECKPOINT_INTERVAL_SECONDS: "900",
            v.ENV_RESUME_FROM: "s3://ckpt/job/step-9",
        },
        {v.ENV_TPU_WORKER_ID, v.ENV_TPU_WORKER_HOSTNAMES},
    ),
    (
        "tpu-multi-host",
        spec(pool=TPU_POOL, pool_name="v5e", accelerator="tpu-v5e", devices=16, nodes=4),
        {v.RESOURCE_GOOGLE_TPU: "4"},
        dict(TPU_POOL.node_selector),
        {
            v.ENV_TPU_WORKER_ID: INDEX,
            v.ENV_TPU_WORKER_HOSTNAMES: ",".join(f"llama-a0-{i}.llama-a0" for i in range(4)),
            v.RDZV_WORLD_SIZE: "16",
            v.ENV_NPROC_PER_NODE: "4",
        },
        set(),
    ),
    (
        "tpu-single-host",
        spec(pool=TPU_POOL, pool_name="v5e", accelerator="tpu-v5e", devices=4, nodes=1),
        {v.RESOURCE_GOOGLE_TPU: "4"},
        dict(TPU_POOL.node_selector),
        {v.ENV_DEVICES: "4"},
        {v.ENV_TPU_WORKER_ID, v.ENV_TPU_WORKER_HOSTNAMES},
    ),
    (
        "pool-without-selector",
        spec(pool=BARE_POOL, pool_name="rack-7", devices=8, nodes=1),
        {v.RESOURCE_NVIDIA_GPU: "8"},
        {v.LABEL_POOL: "rack-7"},
        {v.ENV_NPROC_PER_NODE: "8"},
        set(),
    ),
]


@pytest.mark.parametrize(
    ("w", "resources", "selector", "env", "absent"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_build(
    w: WorkloadSpec, resources: dict[str, str], selector: dict[str, str], env: dict[str, str], absent: set[str]
) -> None:
    j, svc = build(w)
    assert j["spec"]["completionMode"] == "Indexed"
    assert j["spec"]["completions"] == j["spec"]["parallelism"] == w.nodes
    assert j["spec"]["backoffLimit"] == 0
    assert "activeDeadlineSeconds" not in j["spec"]
    pod = pod_of(j)
    assert pod["restartPolicy"] == "Never"
    assert j["metadata"]["name"] == w.name
    if w.nodes > 1:  # a gang's pods meet through the headless Service's DNS names
        assert svc is not None and pod["subdomain"] == svc["metadata"]["name"] == w.name
    else:  # one pod alone: no Service, no DNS name to resolve
        assert svc is None and "subdomain" not in pod
    assert pod["nodeSelector"] == selector
    (container,) = pod["containers"]
    assert container["name"] == "main"
    assert container["resources"] == {"requests": resources, "limits": resources}
    got = env_of(j)
    assert {k: got.get(k) for k in env} == env
    assert not absent & got.keys()
    assert (pod.get("affinity") is not None) == (w.nodes > 1)


def test_tolerations_add_the_device_taint_only_when_not_tolerated() -> None:
    tolerated = pod_of(build(spec())[0])["tolerations"]
    assert tolerated == [{"key": v.TAINT_GPU, "operator": "Exists", "effect": "NoSchedule"}]
    bare = pod_of(build(spec(pool=BARE_POOL, pool_name="rack"))[0])["tolerations"]
    assert bare == [{"key": v.TAINT_GPU, "operator": "Exists", "effect": "NoSchedule"}]
    tpu = pod_of(build(spec(pool=TPU_POOL, pool_name="v5e", accelerator="tpu-v5e", devices=4))[0])["tolerations"]
    assert tpu == [{"key": v.TAINT_TPU, "operator": "Exists", "effect": "NoSchedule"}]
    # An Equal toleration of another value does not tolerate the taint whatever its value.
    equal = AcceleratorPoolSpec.model_validate(
        {**H100_POOL.to_wire(), "tolerations": [{"key": v.TAINT_GPU, "value": "x"}]}
    )
    got = pod_of(build(spec(pool=equal))[0])["tolerations"]
    assert got == [
        {"key": v.TAINT_GPU, "operator": "Equal", "value": "x"},
        {"key": v.TAINT_GPU, "operator": "Exists", "effect": "NoSchedule"},
    ]


def test_gang_pods_never_share_a_node() -> None:
    pod = pod_of(build(spec(devices=16, nodes=2))[0])
    (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == {v.LABEL_JOB: "llama", v.LABEL_ATTEMPT: "0"}


@pytest.mark.parametrize("nodes", [1, 2])
def test_an_attempt_after_a_consolidation_move_keeps_off_the_gangs_nodes(nodes: int) -> None:
    from dataclasses import replace

    pod = pod_of(build(replace(spec(devices=8 * nodes, nodes=nodes), avoid_nodes=("n2", "n1")))[0])
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term == {
        "matchFields": [
            {"key": "metadata.name", "operator": "NotIn", "values": ["n1"]},
            {"key": "metadata.name", "operator": "NotIn", "values": ["n2"]},
        ]
    }
    assert ("podAntiAffinity" in pod["affinity"]) == (nodes > 1)  # the gang's own rule stays
    assert "nodeAffinity" not in (pod_of(build(spec(devices=8 * nodes, nodes=nodes))[0]).get("affinity") or {})


def test_pod_failure_policy_rules_in_the_order_the_operator_reads() -> None:
    rules = build(spec())[0]["spec"]["podFailurePolicy"]["rules"]
    assert len(rules) == 2
    assert rules[RULE_DISRUPTION] == {
        "action": "FailJob",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
    }
    assert rules[RULE_EXIT_CODE] == {
        "action": "FailJob",
        "onExitCodes": {"containerName": "main", "operator": "NotIn", "values": [0]},
    }
    assert (RULE_DISRUPTION, RULE_EXIT_CODE) == (0, 1)


def test_owner_references_and_labels_lead_back_to_the_job() -> None:
    j, svc = build(spec(attempt=2, devices=16, nodes=2))
    assert svc is not None
    owner = {
        "apiVersion": "accel.dev/v1alpha1",
        "kind": "AcceleratorJob",
        "name": "llama",
        "uid": UID,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    want = {
        v.LABEL_JOB: "llama",
        v.LABEL_TEAM: "research",
        v.LABEL_POOL: "h100-spot",
        v.LABEL_ATTEMPT: "2",
        v.LABEL_MANAGED_BY: "accel-operator",
    }
    for obj in (j, svc):
        assert obj["metadata"]["ownerReferences"] == [owner]
        assert obj["metadata"]["labels"] == want
        assert obj["metadata"]["namespace"] == "ml"
    assert j["spec"]["template"]["metadata"]["labels"] == want


def test_service_is_headless_and_selects_this_attempt() -> None:
    _, svc = build(spec(attempt=1, devices=16, nodes=2))
    assert svc is not None and svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == {v.LABEL_JOB: "llama", v.LABEL_ATTEMPT: "1"}
    assert svc["spec"]["ports"] == [{"name": "rendezvous", "port": 29500, "targetPort": 29500, "protocol": "TCP"}]


def test_container_follows_the_checkpoint_contract_and_drops_privileges() -> None:
    s = job().spec().model_copy(update={"command": ["python", "-m", "train"], "args": ["--lr", "3e-4"]})
    pod = pod_of(build(spec(s))[0])
    (c,) = pod["containers"]
    assert c["image"] == "trainer:1"
    assert (c["command"], c["args"]) == (["python", "-m", "train"], ["--lr", "3e-4"])
    assert pod["terminationGracePeriodSeconds"] == 120
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert "runAsNonRoot" not in str(pod)
    (mount,) = c["volumeMounts"]
    (volume,) = pod["volumes"]
    assert mount == {"name": volume["name"], "mountPath": "/etc/accel", "readOnly": True}
    assert volume["downwardAPI"]["items"] == [
        {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}
    ]
    assert f"{mount['mountPath']}/annotations" == v.POD_ANNOTATIONS_FILE
    # No command or args in the spec: the image's own entrypoint runs.
    bare = pod_of(build(spec())[0])["containers"][0]
    assert "command" not in bare and "args" not in bare


def test_tenant_env_comes_after_ours_and_may_replace_rendezvous_names() -> None:
    s = (
        job()
        .spec()
        .model_copy(
            update={"env": [EnvVar(name="NCCL_DEBUG", value="INFO"), EnvVar(name="MASTER_PORT", value="23456")]}
        )
    )
    env = pod_of(build(spec(s, devices=16, nodes=2))[0])["containers"][0]["env"]
    names = [e["name"] for e in env]
    assert names[-2:] == ["NCCL_DEBUG", "MASTER_PORT"]
    assert names.count("MASTER_PORT") == 1
    assert names.index(v.ENV_JOB_NAME) == 0
    assert env_of(build(spec(s))[0])["MASTER_PORT"] == "23456"


@pytest.mark.parametrize("name", ["ACCEL_RESUME_FROM", "CUDA_VISIBLE_DEVICES", "LD_PRELOAD", "TPU_WORKER_ID"])
def test_reserved_env_is_refused_even_past_the_model(name: str) -> None:
    # model_construct skips validation: an object that never passed the API model (a forged
    # status, a future code path) is still stopped here.
    forged = job().spec().model_copy(update={"env": [EnvVar.model_construct(name=name, value="x")]})
    with pytest.raises(ReservedEnv, match=name):
        build(spec(forged))


def test_a_policy_may_reserve_more_env() -> None:
    s = job().spec().model_copy(update={"env": [EnvVar(name="NCCL_IB_HCA", value="mlx5")]})
    build(spec(s))
    with pytest.raises(ReservedEnv, match="NCCL_IB_HCA"):
        build(replace(spec(s), reserved_env=("NCCL_*",)))


@pytest.mark.parametrize(("devices", "nodes"), [(3, 2), (1, 2), (0, 1), (8, 0)])
def test_devices_must_split_evenly_over_nodes(devices: int, nodes: int) -> None:
    with pytest.raises(UnbuildableWorkload, match="multiple of nodes"):
        build(spec(devices=devices, nodes=nodes))


LONG = "x" * 250
NAMES = [
    "llama",
    "a" * 57,
    "b" * 60,
    LONG,
    "7b-finetune",
    "team.llama-3.1-8b",
    "a" * 50 + "." + "b" * 50,
]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("attempt", [0, 7, 1000])
def test_names_are_valid_labels_with_room_for_the_pod_index(name: str, attempt: int) -> None:
    got = workload_name(name, attempt)
    assert DNS_1035.match(got), got  # a Service name must start with a letter
    assert len(got) <= MAX_NAME_LENGTH
    assert DNS_LABEL.match(f"{got}-65535") and len(f"{got}-65535") <= 63
    assert workload_name(name, attempt) == got  # deterministic
    j, svc = build(spec(name=name, attempt=attempt, pool_name=LONG, devices=16, nodes=2))
    assert svc is not None
    for value in [*j["metadata"]["labels"].values(), *svc["spec"]["selector"].values()]:
        assert len(value) <= 63 and LABEL_VALUE.match(value), value
    assert j["metadata"]["ownerReferences"][0]["name"] == name  # the full name, never shortened


def test_names_differ_per_attempt_and_per_job() -> None:
    assert workload_name("llama", 0) == "llama-a0"
    assert workload_name("llama", 1) == "llama-a1"
    names = {workload_name(n, a) for n in [LONG, LONG + "y", "a.b", "a-b"] for a in (0, 1)}
    assert len(names) == 8
    with pytest.raises(UnbuildableWorkload):
        workload_name("llama", -1)


def test_long_pool_name_selects_on_its_label_value() -> None:
    pod = pod_of(build(spec(pool=BARE_POOL, pool_name=LONG))[0])
    (value,) = pod["nodeSelector"].values()
    assert value == workloads.label_value(LONG) and len(value) <= 63


def test_tpu_slices_past_the_largest_are_refused() -> None:
    w = spec(pool=TPU_POOL, pool_name="v5e", accelerator="tpu-v5e", devices=4 * 5000, nodes=5000)
    with pytest.raises(UnbuildableWorkload, match="TPU slice"):
        build(w)


# --- reading how a Job ended ------------------------------------------------------------------


def _ended(type_: str, reason: str, message: str) -> dict[str, Any]:
    return {"status": {"conditions": [{"type": type_, "status": "True", "reason": reason, "message": message}]}}


@pytest.mark.parametrize(
    ("job_obj", "rule"),
    [
        (
            _ended(
                "Failed",
                "PodFailurePolicy",
                "Container main for pod ns/p-0-x failed with exit code 3 matching FailJob rule at index 1",
            ),
            1,
        ),
        (
            _ended(
                "FailureTarget",
                "PodFailurePolicy",
                "Pod ns/p-1-y has condition DisruptionTarget matching FailJob rule at index 0",
            ),
            0,
        ),
        (_ended("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit"), None),
        (_ended("Complete", "CompletionsReached", ""), None),
        ({"status": {}}, None),
        ({}, None),
    ],
)
def test_failed_rule(job_obj: dict[str, Any], rule: int | None) -> None:
    assert workloads.failed_rule(job_obj) == rule


# --- the fake and the real client's errors ----------------------------------------------------


def test_fake_creates_once_records_calls_and_fails_on_demand() -> None:
    fake = FakeWorkloadClient()
    j, svc = build(spec(devices=16, nodes=2))
    assert fake.create(j, svc) is True
    assert fake.create(j, svc) is False
    assert list(fake.jobs) == [("ml", "llama-a0")] and list(fake.services) == [("ml", "llama-a0")]
    fake.fail_next = ClusterUnavailable("down")
    with pytest.raises(ClusterUnavailable):
        fake.create(j, svc)
    assert fake.fail_next is None
    other = replace(spec(devices=16, nodes=2), job_uid="another")
    with pytest.raises(WorkloadConflict):
        fake.create(*build(other))
    fake.delete("ml", "llama-a0")
    fake.delete("ml", "llama-a0")  # gone already is fine
    assert not fake.jobs and not fake.services
    assert fake.calls == [("create", "ml", "llama-a0")] * 4 + [("delete", "ml", "llama-a0")] * 2
    fake.reset()
    assert not fake.calls


def test_a_one_node_attempt_gets_no_service() -> None:
    fake = FakeWorkloadClient()
    j, svc = build(spec())
    assert svc is None
    assert fake.create(j, svc) is True and fake.create(j, svc) is False
    assert list(fake.jobs) == [("ml", "llama-a0")] and not fake.services
    fake.delete("ml", "llama-a0")  # no Service to delete is fine
    assert not fake.jobs


def test_unreachable_api_server_is_cluster_unavailable() -> None:
    cfg = client.Configuration()
    cfg.host = "https://127.0.0.1:9"  # discard port: nothing listens, the connection is refused
    cfg.retries = 0
    kube = KubeWorkloadClient(client.ApiClient(cfg))
    with pytest.raises(ClusterUnavailable, match="creating Service ml/llama-a0"):
        kube.create(*build(spec(devices=16, nodes=2)))
    with pytest.raises(ClusterUnavailable, match="creating Job ml/llama-a0"):
        kube.create(*build(spec()))  # one node: no Service, the Job first
    with pytest.raises(ClusterUnavailable, match="deleting Job ml/llama-a0"):
        kube.delete("ml", "llama-a0")


def test_api_errors_map_to_the_port_vocabulary() -> None:
    rejected = client.exceptions.ApiException(status=422, reason="Unprocessable Entity")
    rejected.body = '{"kind":"Status","message":"Job.batch \\"x\\" is invalid: spec.completions: Invalid value"}'
    got = workloads._translate(rejected, "creating Job ml/x")
    assert isinstance(got, workloads.WorkloadRejected)
    assert got.status == 422 and got.message.startswith('Job.batch "x" is invalid')
    assert isinstance(workloads._translate(client.exceptions.ApiException(status=403), "x"), workloads.WorkloadRejected)
    for status in (500, 503, 429):
        assert isinstance(workloads._translate(client.exceptions.ApiException(status=status), "x"), ClusterUnavailable)


# --- pvc:// checkpoints: the claim mounted the same on every attempt -----------------------------


def _pvc_job(uri: str = "pvc://ckpt/team/run") -> AcceleratorJobSpec:
    base = job().spec().model_dump(by_alias=True, mode="json", exclude_none=True)
    return AcceleratorJobSpec.model_validate({**base, "checkpoint": {"uri": uri, "intervalMinutes": 10}})


def test_a_pvc_checkpoint_mounts_its_claim_path_the_same_on_every_attempt() -> None:
    mounts = []
    for attempt, resume in ((0, None), (3, "pvc://ckpt/team/run/step-120")):
        j, _ = build(spec(_pvc_job(), attempt=attempt, resume_from=resume))
        pod = pod_of(j)
        (volume,) = [vol for vol in pod["volumes"] if "persistentVolumeClaim" in vol]
        assert volume["persistentVolumeClaim"] == {"claimName": "ckpt"}
        (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == volume["name"]]
        assert (mount["mountPath"], mount["subPath"]) == (v.CHECKPOINT_MOUNT_DIR, "team/run")
        assert not mount.get("readOnly")
        env = env_of(j)
        assert env[v.ENV_CHECKPOINT_DIR] == v.CHECKPOINT_MOUNT_DIR
        assert env[v.ENV_CHECKPOINT_URI] == "pvc://ckpt/team/run"
        mounts.append(mount)
        if resume is None:
            assert env[v.ENV_RESUME_FROM_DIR] == "" and env[v.ENV_RESUME_FROM] == ""
        else:
            assert env[v.ENV_RESUME_FROM] == resume
            assert env[v.ENV_RESUME_FROM_DIR] == f"{v.CHECKPOINT_MOUNT_DIR}/step-120"
    assert mounts[0] == mounts[1]


def test_a_claim_root_checkpoint_has_no_sub_path() -> None:
    j, _ = build(spec(_pvc_job("pvc://ckpt")))
    (mount,) = [m for m in pod_of(j)["containers"][0]["volumeMounts"] if m["mountPath"] == v.CHECKPOINT_MOUNT_DIR]
    assert "subPath" not in mount


@pytest.mark.parametrize("resume", ["pvc://other/team/run/step-1", "pvc://ckpt/team/run/x/step-1", "s3://b/step-1"])
def test_a_resume_point_outside_the_job_uri_maps_to_no_directory(resume: str) -> None:
    env = env_of(build(spec(_pvc_job(), resume_from=resume))[0])
    assert env[v.ENV_RESUME_FROM_DIR] == ""


def test_an_s3_checkpoint_mounts_nothing() -> None:
    j, _ = build(spec())
    assert [vol["name"] for vol in pod_of(j)["volumes"]] == ["accel-annotations"]
    assert v.ENV_CHECKPOINT_DIR not in env_of(j)
