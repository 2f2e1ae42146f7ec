"""The demo: the local cluster, simulated GPU/TPU pools, the operator, and jobs that run.

``python -m accel_localcluster.demo`` (what ``bash hack/dev.sh demo`` runs):

1. starts the control plane, installs the CRDs, creates the example pools with KWOK nodes
   behind them (two per pool), and starts the operator (``python -m accel_operator``);
2. submits every example job: each is planned, and admitted all-or-nothing where its devices
   are free now, or waits with the reason;
3. on a small pool of its own (one node, 8 H100s), runs three 8-GPU jobs that compete for the
   same node: one runs, two wait in queue order; each finished job (the demo ends its pods, as
   a training program would) lets the next one in;
4. policy at admission: the operator serves its admission webhooks (on localhost, registered
   with their CA bundle); ``kubectl apply`` of a spot job without checkpointing, and of a job
   naming another namespace's team, are refused with the messages the user sees;
5. on a pool of two nodes, a device fails under a running job: the operator taints the node, asks
   the job to checkpoint and moves it to the other node (:mod:`demo_reschedule`); then, on a
   fragmented pool of three nodes, a 2-node gang waits with a proposal until a policy allows
   consolidation, and one 4-GPU job moves so that it starts (:mod:`demo_consolidate`);
6. a spot interruption warning on EventBridge's SQS queue (moto, :mod:`demo_signals`) for the
   node of a running spot job: the operator taints the node, asks the job's pod to checkpoint
   now and deletes the message, before the node goes; then the node goes (a preemption);
7. on a GKE spot pool, preempts a running job twice: each new attempt resumes from the checkpoint
   the job reported, with the lost work in its status; the second falls back to on-demand
   (:mod:`demo_spot`);
8. prints every job's phase, pool, devices and why, the events of two of them, and what
   `kubectl accel why` says of the preempted one;
9. ends with the per-team cost table from the jobs' ledgers (``accelctl cost report``) and
   writes the HTML cost report next to the cluster's state.

The cluster is left running for exploration (``accel-cluster status``, ``accel-cluster down``),
without the example policy and the webhook configurations (they would judge every later job).
"""

from __future__ import annotations

import argparse
import copy
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from accel_api import load_documents, parse_resource, registry
from accel_api import vocabulary as v
from accel_api.pool import AcceleratorPool
from accel_localcluster import (
    default_cluster,
    demo_consolidate,
    demo_pools,
    demo_reschedule,
    demo_signals,
    demo_spot,
    kubeapi,
    nodes,
)
from accel_localcluster.control_plane import REPO

EXAMPLES = REPO / "examples"
DEMO_NS = "demo"
DEMO_CLAIMS = ("checkpoints", "demo-checkpoints")  # the claims the demo jobs' pvc:// checkpoints name
# The namespaces' teams (the label the platform team owns): a job may only name its namespace's.
TEAMS = {"ml-research": "research", "ml-serving": "serving", DEMO_NS: "research"}
WEBHOOK_CONFIGURATION = v.GROUP  # the operator's managed webhook configurations
QUEUE_POOL = "demo-h100-queue"


COST_INTERVAL = 2.0  # seconds between the operator's cost accrual ticks in the demo


def _get(custom: client.CustomObjectsApi, ns: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = custom.get_namespaced_custom_object(v.GROUP, v.VERSION, ns, registry.JOB.plural, name)
    return obj


def _phase(custom: client.CustomObjectsApi, ns: str, name: str) -> str:
    return str((_get(custom, ns, name).get("status") or {}).get("phase") or "-")


def _wait(what: str, check: Any, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.5)
    print(f"  (timed out after {timeout:.0f}s waiting for {what})", file=sys.stderr)
    return False


def _end_pods(core: client.CoreV1Api, ns: str, job: str, code: int = 0) -> int:
    n = 0
    for pod in core.list_namespaced_pod(ns, label_selector=f"{v.LABEL_JOB}={job}").items:
        if pod.status.phase == "Running":
            core.patch_namespaced_pod(
                pod.metadata.name, ns, {"metadata": {"annotations": {v.ANNOTATION_SIM_EXIT_CODE: str(code)}}}
            )
            n += 1
    return n


def _clean(custom: client.CustomObjectsApi, namespaces: set[str]) -> None:
    """Remove the jobs an earlier run of the demo left, so that this run starts from scratch."""
    for ns in sorted(namespaces):
        with kubeapi.ignoring(404):
            custom.delete_collection_namespaced_custom_object(v.GROUP, v.VERSION, ns, registry.JOB.plural)

    def gone() -> bool:
        for ns in namespaces:
            try:
                items = custom.list_namespaced_custom_object(v.GROUP, v.VERSION, ns, registry.JOB.plural)["items"]
            except client.exceptions.ApiException:
                continue
            if items:
                return False
        return True

    _wait("the previous run's jobs gone", gone, 60)
    with kubeapi.ignoring(404):
        custom.delete_cluster_custom_object(v.GROUP, v.VERSION, registry.POOL.plural, QUEUE_POOL)
    core = client.CoreV1Api(custom.api_client)
    for node in core.list_node(label_selector=f"{v.LABEL_POOL}={QUEUE_POOL}").items:
        with kubeapi.ignoring(404):
            core.delete_node(node.metadata.name)
    demo_signals.clean(custom.api_client)
    demo_spot.clean(core, custom)


def _queue_job(name: str, priority: int) -> dict[str, Any]:
    doc = next(d for d in load_documents((EXAMPLES / "01-finetune-single-gpu.yaml").read_text()))
    doc = copy.deepcopy(doc)
    doc["metadata"] = {"name": name, "namespace": DEMO_NS}
    doc["spec"]["placement"] = {"pools": [QUEUE_POOL], "minDevices": 8, "maxDevices": 8}
    doc["spec"]["priority"] = priority
    return doc


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _checkpoint_claim(api: client.ApiClient, doc: dict[str, Any]) -> None:
    """The claim of an example job's pvc:// checkpoint, bound (its pods mount it)."""
    uri = ((doc.get("spec") or {}).get("checkpoint") or {}).get("uri", "")
    if uri.startswith("pvc://"):
        kubeapi.ensure_claim(api, doc["metadata"]["namespace"], uri.removeprefix("pvc://").split("/", 1)[0])


def _label_teams(core: client.CoreV1Api) -> None:
    for ns, team in TEAMS.items():
        kubeapi.ensure_namespace(core.api_client, ns)
        core.patch_namespace(ns, {"metadata": {"labels": {v.LABEL_NAMESPACE_TEAM: team}}})


def _webhook_ready(api: client.ApiClient) -> bool:
    adm = client.AdmissionregistrationV1Api(api)
    try:
        hooks = adm.read_validating_webhook_configuration(WEBHOOK_CONFIGURATION).webhooks or []
    except client.exceptions.ApiException:
        return False
    return bool(hooks) and all(h.client_config.ca_bundle for h in hooks)


def _remove_webhooks(api: client.ApiClient) -> None:
    """The webhook configurations outlive the operator on purpose (failurePolicy Ignore); the demo
    removes them so that the cluster it leaves behind has no webhook pointing at a stopped process."""
    adm = client.AdmissionregistrationV1Api(api)
    with kubeapi.ignoring(404):
        adm.delete_validating_webhook_configuration(WEBHOOK_CONFIGURATION)
    with kubeapi.ignoring(404):
        adm.delete_mutating_webhook_configuration(WEBHOOK_CONFIGURATION)


def _refused(cluster: Any, custom: client.CustomObjectsApi, doc: dict[str, Any], timeout: float) -> str:
    """``kubectl apply`` of ``doc``, printed as a user would see it; retried while the webhook's
    indexes are still loading (a job let through then is deleted)."""
    path = cluster.state / f"{doc['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    kubectl = [str(cluster.bin / "kubectl"), "--kubeconfig", str(cluster.kubeconfig)]
    end = time.monotonic() + timeout
    while True:
        proc = subprocess.run([*kubectl, "apply", "-f", str(path)], capture_output=True, text=True, check=False)
        if proc.returncode != 0 or time.monotonic() > end:
            break
        with kubeapi.ignoring(404):
            custom.delete_namespaced_custom_object(
                v.GROUP, v.VERSION, doc["metadata"]["namespace"], registry.JOB.plural, doc["metadata"]["name"]
            )
        time.sleep(0.5)
    print(f"$ kubectl apply -f {path.name}\n{(proc.stdout + proc.stderr).rstrip()}")
    return proc.stderr


_SECTIONS = [0]


def _section(title: str) -> None:
    """Print the next numbered heading of the demo's output."""
    _SECTIONS[0] += 1
    print(f"\n== {_SECTIONS[0]}. {title}")


def _policy_demo(cluster: Any, api: client.ApiClient, custom: client.CustomObjectsApi, timeout: float) -> None:
    _section("policy at admission (examples/20-policy.yaml; namespace ml-research is team research)")
    _wait("the admission webhook registered", lambda: _webhook_ready(api), timeout)
    base = next(d for d in load_documents((EXAMPLES / "02-multinode-spot-training.yaml").read_text()))
    spot = copy.deepcopy(base)
    spot["metadata"]["name"] = "spot-no-checkpoint"
    spot["spec"].pop("checkpoint", None)
    spot["spec"]["spot"] = {"policy": "prefer"}
    print("-- a spot job without checkpointing:")
    _refused(cluster, custom, spot, timeout)
    other = copy.deepcopy(base)
    other["metadata"]["name"] = "charged-to-serving"
    other["spec"]["team"] = "serving"
    print("\n-- a job in ml-research that names the serving team:")
    _refused(cluster, custom, other, timeout)
    borrowed = copy.deepcopy(base)
    borrowed["metadata"]["name"] = "reads-serving-checkpoints"
    borrowed["spec"]["checkpoint"] = {"uri": "s3://ml-checkpoints/serving/llama/run-1", "intervalMinutes": 30}
    print("\n-- a research job whose checkpoints would be in the serving team's prefix:")
    _refused(cluster, custom, borrowed, timeout)


def _table(custom: client.CustomObjectsApi, keys: list[tuple[str, str]]) -> None:
    print(f"\n{'JOB':40} {'PHASE':13} {'ATT':>3} {'POOL':18} {'DEV':>4} {'COST $':>9}  WHY")
    for ns, name in keys:
        st = _get(custom, ns, name).get("status") or {}
        p = st.get("plan") or {}
        cost = p.get("costUsd")
        why = (st.get("message") or "")[:110]
        print(
            f"{ns + '/' + name:40} {st.get('phase', '-'):13} {st.get('attempt', 0):>3} {p.get('pool') or '-':18} "
            f"{p.get('devices') or '-':>4} {'-' if cost is None else f'{cost:,.2f}':>9}  {why}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait at each step")
    args = parser.parse_args(argv)

    cluster = default_cluster()
    t0 = time.monotonic()
    cluster.up(build=True)
    print(f"local control plane healthy in {time.monotonic() - t0:.1f}s (KUBECONFIG={cluster.kubeconfig})")
    api = kubeapi.api_client(cluster.kubeconfig)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    kubeapi.install_crds(api)
    kubeapi.ensure_namespace(api, "accel-system")  # the operator's cost rollup (a ConfigMap) lives there
    _label_teams(core)

    docs = [d for p in sorted(EXAMPLES.glob("*.yaml")) for d in load_documents(p.read_text(), source=p.name)]
    _clean(custom, {d["metadata"]["namespace"] for d in docs if d["kind"] == "AcceleratorJob"} | {DEMO_NS})
    demo_reschedule.clean(api)
    demo_consolidate.clean(api)
    for doc in docs:
        if doc["kind"] in ("AcceleratorPool", "AcceleratorPolicy"):
            kubeapi.apply(api, doc)
        res = parse_resource(doc)
        if isinstance(res, AcceleratorPool):
            made = nodes.ensure_nodes(
                core, nodes.node_manifests(res.metadata.name or "pool", res.spec, count=min(res.spec.max_nodes, 2))
            )
            print(
                f"pool {res.metadata.name}: {res.spec.devices_per_node}x {res.spec.accelerator} "
                f"{res.spec.capacity_type.value}, simulated nodes {', '.join(made)}"
            )

    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "ACCEL_OPERATOR_LIVENESS_PORT": "0"}
    env.setdefault("ACCEL_OPERATOR_METRICS_PORT", "0")
    # The admission webhooks, on localhost: the local API server runs on this machine.
    env.update(
        ACCEL_OPERATOR_WEBHOOK_PORT=str(_free_port()),
        ACCEL_OPERATOR_WEBHOOK_HOST="127.0.0.1",
        ACCEL_OPERATOR_WEBHOOK_ADDRESS="127.0.0.1",
    )
    env.setdefault("ACCEL_OPERATOR_CHECKPOINT_GRACE_SECONDS", "5")  # the rescheduling step's wait
    sqs = demo_signals.start_queue()  # EventBridge's interruption queue, simulated (None without moto)
    if sqs is not None:
        env.update(sqs.operator_env())
    env.setdefault("ACCEL_OPERATOR_COST_INTERVAL_SECONDS", str(COST_INTERVAL))
    env.setdefault("ACCEL_OPERATOR_COST_WRITE_SECONDS", str(COST_INTERVAL))
    log_path = cluster.state / "logs" / "operator.log"
    with log_path.open("wb") as log:
        operator = subprocess.Popen([sys.executable, "-m", "accel_operator"], env=env, stdout=log, stderr=log)
    keys: list[tuple[str, str]] = []
    try:
        _section(f"the example jobs (operator log: {log_path})")
        for doc in docs:
            if doc["kind"] != "AcceleratorJob":
                continue
            kubeapi.ensure_namespace(api, doc["metadata"]["namespace"])
            _checkpoint_claim(api, doc)
            kubeapi.apply(api, doc)
            keys.append((doc["metadata"]["namespace"], doc["metadata"]["name"]))
        _wait("every example job decided", lambda: all(_phase(custom, *k) != "-" for k in keys), args.timeout)
        _wait(
            "admitted jobs running",
            lambda: all(_phase(custom, *k) not in ("Admitted", "-") for k in keys),
            args.timeout,
        )
        _table(custom, keys)

        _section(f"three 8-GPU jobs compete for the one node of {QUEUE_POOL}")
        made = demo_pools.make_pool(api, QUEUE_POOL, 1)
        print(f"pool {QUEUE_POOL}: 8x h100-80gb on-demand, one simulated node {made[0]} (for the queue)")
        kubeapi.ensure_namespace(api, DEMO_NS)
        for claim in DEMO_CLAIMS:  # the demo jobs' pvc:// checkpoints: every attempt's pods mount the claim
            kubeapi.ensure_claim(api, DEMO_NS, claim)
        queue = [("first", 0), ("urgent", 100), ("later", 0)]
        kubeapi.apply(api, _queue_job("first", 0))
        _wait("first running", lambda: _phase(custom, DEMO_NS, "first") == "Running", args.timeout)
        for name, prio in queue[1:]:
            kubeapi.apply(api, _queue_job(name, prio))
        qkeys = [(DEMO_NS, n) for n, _ in queue]
        keys += qkeys
        _wait("the others waiting", lambda: all(_phase(custom, *k) != "-" for k in qkeys), args.timeout)
        _table(custom, qkeys)
        for step in range(len(queue)):
            running = [k for k in qkeys if _phase(custom, *k) == "Running"]
            if not running:
                break
            ns, name = running[0]
            print(f"\n-- {name} finishes (its pods exit 0): its devices go to the next job in queue order")
            _end_pods(core, ns, name)
            _wait(f"{name} Succeeded", lambda n=name: _phase(custom, DEMO_NS, n) == "Succeeded", args.timeout)
            if step < len(queue) - 1:
                _wait(
                    "the next job running",
                    lambda: sum(_phase(custom, *k) == "Running" for k in qkeys) == 1,
                    args.timeout,
                )
            _table(custom, qkeys)
        _policy_demo(cluster, api, custom, args.timeout)

        _section("a device fails under a running job: the job moves")
        demo_reschedule.run(api, cluster.kubeconfig, DEMO_NS, _wait, args.timeout)

        _section("a fragmented pool keeps a gang waiting: consolidation, once a policy allows it")
        demo_consolidate.run(api, DEMO_NS, _wait, args.timeout)

        _section("a spot interruption warning: checkpoint now, before the node goes")
        if sqs is None:
            print("(skipped: moto is not installed; it comes with the workspace's dev extra)")
        else:
            demo_signals.run(api, sqs, DEMO_NS, args.timeout)
            keys.append((DEMO_NS, demo_signals.JOB))
            _table(custom, [(DEMO_NS, demo_signals.JOB)])

        _section("a spot preemption: resume from the latest checkpoint, the lost work, on-demand fallback")
        demo_spot.run(api, DEMO_NS, _queue_job(demo_spot.JOB, 0), wait=_wait, timeout=args.timeout)
        keys.append((DEMO_NS, demo_spot.JOB))
        _table(custom, [(DEMO_NS, demo_spot.JOB)])
        time.sleep(2 * COST_INTERVAL + 1)  # the ledger's last ticks: finished attempts closed
    finally:
        operator.terminate()
        operator.wait(timeout=30)
        if sqs is not None:
            sqs.stop()
        _remove_webhooks(api)
        # The example policy is cluster-wide: left behind, it would judge every later job on this
        # cluster (the cluster tests' too). The demo's jobs, pools and nodes stay for exploration.
        for doc in docs:
            if doc["kind"] == "AcceleratorPolicy":
                with kubeapi.ignoring(404):
                    custom.delete_cluster_custom_object(
                        v.GROUP, v.VERSION, registry.POLICY.plural, doc["metadata"]["name"]
                    )

    _section(f"all jobs\n$ kubectl get acceleratorjobs -A   (KUBECONFIG={cluster.kubeconfig})")
    kubectl = cluster.bin / "kubectl"
    subprocess.run([str(kubectl), "get", "acceleratorjobs", "-A"], env=env, check=False)
    print(f"\n$ kubectl get events -n {DEMO_NS} --field-selector involvedObject.name=later")
    subprocess.run(
        [str(kubectl), "get", "events", "-n", DEMO_NS, "--field-selector", "involvedObject.name=later"],
        env=env,
        check=False,
    )
    print(f"\n$ kubectl get events -n {DEMO_NS} --field-selector involvedObject.name={demo_spot.JOB}")
    subprocess.run(
        [str(kubectl), "get", "events", "-n", DEMO_NS, "--field-selector", f"involvedObject.name={demo_spot.JOB}"],
        env=env,
        check=False,
    )
    # The same story as the plugin tells it (kubectl finds kubectl-accel on PATH; the module is
    # run directly here so the demo needs no PATH change).
    print(f"\n$ kubectl accel why {demo_spot.JOB} -n {DEMO_NS}")
    accel = [sys.executable, "-m", "accel_operator.cli.main"]
    subprocess.run([*accel, "why", demo_spot.JOB, "-n", DEMO_NS], env=env, check=False)
    # What the running jobs' devices do now, from the node reports (utilization, memory, the idle
    # money and why the devices are not busy).
    print("\n$ kubectl accel top -A")
    subprocess.run([*accel, "top", "-A"], env=env, check=False)
    _cost_report(cluster.state, env)
    _what_if(cluster.state, env)
    print("\nThe cluster is still running: `accel-cluster status`, `accel-cluster down`.")
    return 0


def _cost_report(state: Path, env: dict[str, str]) -> None:
    """The per-team cost table and the HTML report, from the jobs' ledgers (``accelctl cost``)."""
    accelctl = [sys.executable, "-m", "accel_operator.cli.main", "cost", "report"]
    _section("what it cost, per team (the jobs' ledgers: devices × seconds × the pool's price)")
    print("$ accelctl cost report -A --by team --since 30d")
    subprocess.run([*accelctl, "-A", "--by", "team", "--since", "30d"], env=env, check=False)
    html = state / "cost-report.html"
    subprocess.run([*accelctl, "-A", "--by", "team", "-o", "html", "--out", str(html)], env=env, check=False)
    print(f"The HTML report (charts, no network needed): {html}")
    focus = state / "cost-focus.csv"
    with focus.open("w") as sink:
        subprocess.run([*accelctl, "-A", "--since", "30d", "-o", "focus"], env=env, check=False, stdout=sink)
    rows = max(0, len(focus.read_text().splitlines()) - 1) if focus.exists() else 0
    print(f"The FinOps FOCUS 1.1 export for finance tools: {focus} ({rows} charge rows)")


def _what_if(state: Path, env: dict[str, str]) -> None:
    """What two days of jobs would cost under this engine and the two baselines (``accelctl
    simulate``: the engine on a virtual clock; nothing here touches the cluster)."""
    accelctl = [sys.executable, "-m", "accel_operator.cli.main", "simulate"]
    _section("what would it cost? two synthetic days replayed through the engine and two baselines")
    trace = state / "what-if-trace.jsonl"
    pools = EXAMPLES / "simulate" / "pools.yaml"
    gen = [*accelctl, "generate", "--jobs", "150", "--days", "2", "--seed", "7", "-o", str(trace)]
    subprocess.run(gen, env=env, check=False, stdout=subprocess.DEVNULL)
    run = [*accelctl, "--trace", str(trace), "--pools", str(pools), "--seed", "7"]
    print("$ accelctl simulate generate --jobs 150 --days 2 --seed 7 -o trace.jsonl")
    print("$ accelctl simulate --trace trace.jsonl --pools examples/simulate/pools.yaml --seed 7")
    subprocess.run(run, env=env, check=False, stderr=subprocess.DEVNULL)
    html = state / "what-if.html"
    with html.open("w") as sink:
        subprocess.run([*run, "-o", "html"], env=env, check=False, stdout=sink, stderr=subprocess.DEVNULL)
    print(f"\nThe same side by side as an HTML page (charts, no network needed): {html}")


if __name__ == "__main__":
    sys.exit(main())
