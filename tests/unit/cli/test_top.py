"""``kubectl accel top`` / ``accelctl top``: the rows from jobs, their pods and the node reports
(utilization, memory, idle money now at the accountant's price, the diagnosis), the output forms,
and the kubectl habits (``-n``/``-A``, ``-o``, exit codes) on a faked kube adapter.
tests/cluster/test_kubectl_accel.py runs it through a real kubectl against a real API server."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from accel_api import vocabulary as v
from accel_operator.adapters.kube import jobaccess
from accel_operator.cli import top
from accel_operator.cli.main import main
from accel_operator.reconcile.nodes.diagnose import Verdict

NOW = dt.datetime(2026, 11, 27, 12, 0, tzinfo=dt.UTC)
GIB = 1 << 30


def job(
    name: str, *, ns: str = "ml", phase: str = "Running", devices: int = 2, price: float | None = 4.0
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "phase": phase,
        "attempt": 0,
        "plan": {"pool": "h100", "accelerator": "h100-80gb", "devices": devices, "nodes": 1},
    }
    if price is not None:
        interval = {"start": "2026-11-27T11:00:00Z", "end": "2026-11-27T11:59:00Z", "usdPerDeviceHour": price}
        status["cost"] = {
            "spentUsd": 1.0,
            "attempts": [{"attempt": 0, "pool": "h100", "devices": devices, "intervals": [interval]}],
        }
    return {
        "apiVersion": "accel.dev/v1alpha1",
        "kind": "AcceleratorJob",
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "creationTimestamp": "2026-11-27T10:00:00Z"},
        "spec": {},
        "status": status,
    }


def uid(job_name: str, attempt: int, index: int) -> str:
    """A pod UID (a UUID: the report's podUid is checked to be one)."""
    return f"{sum(map(ord, job_name)):08x}-0000-4000-8000-{attempt:06x}{index:06x}"


def pod(job_name: str, index: int, *, ns: str = "ml", node: str = "n1", attempt: int = 0) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{job_name}-a{attempt}-{index}",
            "namespace": ns,
            "uid": uid(job_name, attempt, index),
            "labels": {
                v.LABEL_MANAGED_BY: v.MANAGED_BY_VALUE,
                v.LABEL_JOB: job_name,
                v.LABEL_ATTEMPT: str(attempt),
            },
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"limits": {v.RESOURCE_NVIDIA_GPU: "1"}}}],
        },
        "status": {"phase": "Running", "startTime": "2026-11-27T11:00:00Z"},
    }


def device(index: int, pod_uid: str, util: float, profile: dict[str, Any] | None) -> dict[str, Any]:
    d: dict[str, Any] = {
        "index": index,
        "uuid": f"GPU-{index}",
        "memoryTotalBytes": 80 * GIB,
        "memoryUsedBytes": 30 * GIB,
        "utilizationGpuPercent": util,
        "utilizationMemoryPercent": 5.0,
        "processes": [{"pid": 100 + index, "podUid": pod_uid}],
    }
    if profile is not None:
        d["profile"] = profile
    return d


def report(node: str, devices: list[dict[str, Any]], *, heartbeat: dt.datetime = NOW) -> dict[str, Any]:
    return {
        "apiVersion": "accel.dev/v1alpha1",
        "kind": "AcceleratorNodeReport",
        "metadata": {"name": node},
        "spec": {"nodeName": node},
        "status": {"backend": "nvml", "devices": devices, "heartbeatTime": heartbeat.strftime("%Y-%m-%dT%H:%M:%SZ")},
    }


def gpm(sm: float, tensor: float, dram: float = 2.0) -> dict[str, Any]:
    return {
        "source": "gpm",
        "intervalSeconds": 15.0,
        "smActivePercent": sm,
        "tensorActivePercent": tensor,
        "dramBandwidthPercent": dram,
        "pcieRxBytesPerSecond": 200_000_000,
        "nvlinkRxBytesPerSecond": 0,
    }


def world(heartbeat: dt.datetime = NOW) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """``starved`` waits on its input on n1 (one device idle); ``busy`` computes on n2;
    ``queued`` waits for capacity; an old attempt's pod of ``starved`` is left on n2."""
    jobs = [job("starved"), job("busy", devices=1, price=2.5), job("queued", phase="Pending")]
    pods = [pod("starved", 0), pod("starved", 1), pod("busy", 0, node="n2"), pod("starved", 9, node="n2", attempt=7)]
    reports = [
        report(
            "n1",
            [
                device(0, uid("starved", 0, 0), 12.0, gpm(8.0, 5.0)),
                device(1, uid("starved", 0, 1), 0.0, gpm(0.0, 0.0)),
            ],
            heartbeat=heartbeat,
        ),
        report(
            "n2",
            [device(0, uid("busy", 0, 0), 99.0, gpm(96.0, 80.0)), device(1, uid("starved", 7, 9), 0.0, None)],
            heartbeat=heartbeat,
        ),
    ]
    return jobs, pods, reports


def test_rows_give_utilization_memory_idle_money_and_the_diagnosis() -> None:
    got = {r.name: r for r in top.rows(*world(), now=NOW)}
    assert set(got) == {"starved", "busy"}  # a job holding no devices has no row
    starved = got["starved"]
    assert (starved.reported, starved.devices, starved.nodes) == (2, 2, ("n1",))
    assert starved.utilization == 6.0
    assert (starved.memory_used, starved.memory_total) == (60 * GIB, 160 * GIB)
    # one of two devices at 0% (the accountant's idle), at the ledger's $4.00 per device-hour
    assert starved.idle_fraction == 0.5
    assert starved.usd_per_device_hour == 4.0 and starved.idle_usd_per_hour == 4.0
    assert starved.diagnosis.verdict is Verdict.INPUT_BOUND
    assert starved.diagnosis.line.startswith("input-bound: SMs active 4.0%, tensor cores 2.5%, PCIe 0.2 GB/s")
    busy = got["busy"]
    assert busy.idle_fraction == 0.0 and busy.idle_usd_per_hour == 0.0
    assert busy.diagnosis.verdict is Verdict.COMPUTE_BOUND


def test_a_stale_or_missing_report_says_so_and_counts_nothing_idle() -> None:
    jobs, pods, _ = world()
    old = NOW - dt.timedelta(seconds=top.STALE_AFTER + 1)
    stale = [report("n1", [device(0, uid("starved", 0, 0), 0.0, gpm(0.0, 0.0))], heartbeat=old)]
    got = {r.name: r for r in top.rows(jobs, pods, stale, now=NOW)}
    assert got["starved"].reported == 0 and got["starved"].idle_fraction == 0.0
    assert got["starved"].diagnosis.line == "no fresh node report shows its devices on n1"
    assert got["busy"].diagnosis.verdict is Verdict.UNKNOWN


def test_no_price_yet_is_no_money_not_zero() -> None:
    jobs, pods, reports = world()
    jobs[0] = job("starved", price=None)
    starved = next(r for r in top.rows(jobs, pods, reports, now=NOW) if r.name == "starved")
    assert starved.usd_per_device_hour is None and starved.idle_usd_per_hour is None
    assert top.row_json(starved)["idleUsdPerHour"] is None


def test_a_hostile_report_is_no_report() -> None:
    jobs, pods, reports = world()
    reports[0]["status"]["devices"][0]["profile"]["smActivePercent"] = 1e9  # out of bounds: refused whole
    starved = next(r for r in top.rows(jobs, pods, reports, now=NOW) if r.name == "starved")
    assert starved.reported == 0 and starved.diagnosis.verdict is Verdict.UNKNOWN


# --- the command ------------------------------------------------------------------------------


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str | None]:
    """The kube adapter faked with :func:`world`; returns the namespaces listed."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "a", "context": {"cluster": "c", "user": "u", "namespace": "ml"}}],
        "current-context": "a",
    }
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(cfg))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    jobs, pods, reports = world(heartbeat=dt.datetime.now(dt.UTC))  # the command reads the real clock
    listed: list[str | None] = []

    def list_jobs(api: Any, ns: str | None) -> list[dict[str, Any]]:
        listed.append(ns)
        return [j for j in jobs if ns is None or j["metadata"]["namespace"] == ns]

    monkeypatch.setattr(jobaccess, "list_jobs", list_jobs)
    monkeypatch.setattr(jobaccess, "list_job_pods", lambda api, ns: pods)
    monkeypatch.setattr(jobaccess, "list_node_reports", lambda api: reports)
    return listed


@pytest.mark.parametrize("prog", ["accelctl", "kubectl accel"])
def test_top_prints_a_table_of_the_current_namespace(
    prog: str, cluster: list[str | None], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["top"], prog=prog) == 0
    out = capsys.readouterr().out.splitlines()
    assert cluster == ["ml"]  # the context's namespace, as kubectl
    assert out[0].split() == ["NAME", "DEVICES", "UTIL", "MEMORY", "IDLE($/H)", "DIAGNOSIS"]
    assert out[1].split()[:5] == ["busy", "1/1", "99%", "30/80GiB", "$0.00"]
    assert out[2].split()[:5] == ["starved", "2/2", "6%", "60/160GiB", "$4.00"]
    assert "input-bound: SMs active 4.0%" in out[2]
    assert len(out) == 3


def test_top_wide_all_namespaces_and_json(cluster: list[str | None], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["top", "-A", "-o", "wide"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert cluster == [None]
    assert out[0].split()[:1] == ["NAMESPACE"] and "TENSOR" in out[0] and "NODES" in out[0]
    assert out[2].split()[:3] == ["ml", "starved", "2/2"] and "50%" in out[2] and " n1 " in out[2]
    assert main(["top", "-n", "ml", "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    starved = next(j for j in data["jobs"] if j["name"] == "starved")
    assert starved["idleUsdPerHour"] == 4.0 and starved["usdPerDeviceHour"] == 4.0
    assert starved["diagnosis"]["verdict"] == "input-bound"
    assert starved["counters"]["source"] == "gpm" and starved["counters"]["smPercent"] == 4.0
    assert main(["top", "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["jobs"] == data["jobs"]


def test_top_with_no_running_job_says_so(cluster: list[str | None], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["top", "-n", "empty"]) == 0
    assert capsys.readouterr().out == "No running jobs in namespace empty.\n"


def test_top_usage_errors_are_2(cluster: list[str | None], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["top", "-n", "x", "-A"]) == 2
    assert "exclude each other" in capsys.readouterr().err
    with pytest.raises(SystemExit) as done:
        main(["top", "-o", "csv"])
    assert done.value.code == 2
