"""``accelctl cost report``: rows per team, job and pool from the jobs' ledgers (read from a file
here; the cluster test reads the cluster), as table, CSV and JSON; and the HTML report opened in
real headless Chromium, which must render every chart with no console error."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from accel_api.enums import CapacityType
from accel_api.job import CostStatus
from accel_operator.accounting import ledger
from accel_operator.cli import main as cli


def _ledger(
    pool: str, capacity: CapacityType, hours: float, price: float, *, preempted_hours: float = 0.0, idle: float = 0.0
) -> CostStatus:
    # Each job ended an hour before now (now: when the fixture runs, just before the test).
    start = dt.datetime.now(dt.UTC) - dt.timedelta(hours=hours + preempted_hours + 1)
    cost = None
    if preempted_hours:
        end0 = start + dt.timedelta(hours=preempted_hours)
        cost = ledger.record(cost, ledger.Observation(0, pool, capacity, 4, start, end0, price, 10.0, idle))
        cost = ledger.close(cost, ledger.AttemptEnd(0, end0, preempted=True))
        start = end0
    end = start + dt.timedelta(hours=hours)
    cost = ledger.record(cost, ledger.Observation(1, pool, capacity, 4, start, end, price, 10.0, idle))
    cost = ledger.close(cost, ledger.AttemptEnd(1, end))
    return cost.model_copy(update={"forecast_usd": 4 * hours * price * 0.9})


def _job(ns: str, name: str, team: str, cost: CostStatus) -> dict[str, Any]:
    return {
        "apiVersion": "accel.dev/v1alpha1",
        "kind": "AcceleratorJob",
        "metadata": {"namespace": ns, "name": name},
        "spec": {"team": team},
        "status": {"cost": cost.model_dump(by_alias=True, mode="json", exclude_none=True)},
    }


@pytest.fixture
def objects(tmp_path: Path) -> Path:
    items = [
        _job("research", "llama-ft", "research", _ledger("h100-spot", CapacityType.SPOT, 10, 4.0, preempted_hours=2)),
        _job("research", "eval", "research", _ledger("h100-od", CapacityType.ON_DEMAND, 3, 10.0, idle=0.5)),
        _job("search", "ranker", "search", _ledger("h100-od", CapacityType.ON_DEMAND, 1, 10.0)),
        {
            "kind": "AcceleratorJob",
            "metadata": {"name": "broken"},
            "spec": {"team": "x"},
            "status": {"cost": {"spentUsd": -1}},
        },
        {
            "kind": "AcceleratorPolicy",
            "metadata": {"name": "budgets"},
            "status": {
                "spend": [
                    {
                        "team": "research",
                        "period": "monthly",
                        "spentUsd": 100.0,
                        "limitUsd": 1000.0,
                        "usedFraction": 0.1,
                    }
                ]
            },
        },
    ]
    path = tmp_path / "objects.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert cli.main(list(argv)) == 0
    return capsys.readouterr().out


def test_json_rows_by_team_equal_the_hand_computation(objects: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = json.loads(_run(capsys, "cost", "report", "--from-file", str(objects), "--by", "team", "-o", "json"))
    rows = {r["key"]: r for r in out["rows"]}
    research = rows["research"]
    # llama-ft: 4 devices × 12 h × $4 (2 h of them lost); eval: 4 × 3 h × $10, half idle.
    assert research["spentUsd"] == pytest.approx(4 * 12 * 4.0 + 4 * 3 * 10.0)
    assert research["lostToPreemptionUsd"] == pytest.approx(4 * 2 * 4.0)
    assert research["idleUsd"] == pytest.approx(4 * 3 * 10.0 * 0.5)
    assert research["onDemandUsd"] == pytest.approx(4 * 15 * 10.0)
    assert research["spotSavingsUsd"] == pytest.approx(4 * 15 * 10.0 - (4 * 12 * 4.0 + 4 * 3 * 10.0))
    assert research["jobs"] == 2
    assert rows["search"]["spentUsd"] == pytest.approx(40.0)
    assert out["budgets"][0]["team"] == "research"


def test_by_pool_and_a_short_window(objects: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = json.loads(_run(capsys, "cost", "report", "--from-file", str(objects), "--by", "pool", "-o", "json"))
    assert {r["key"] for r in out["rows"]} == {"h100-spot", "h100-od"}
    # The last 2 hours: only the last hour of each job ran then (each ended an hour ago).
    out = json.loads(
        _run(capsys, "cost", "report", "--from-file", str(objects), "--by", "job", "--since", "2h", "-o", "json")
    )
    rows = {r["key"]: r["spentUsd"] for r in out["rows"]}
    assert rows["research/llama-ft"] == pytest.approx(4 * 1 * 4.0, rel=2e-3)
    assert rows["search/ranker"] == pytest.approx(4 * 1 * 10.0, rel=2e-3)


def test_table_and_csv(objects: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = _run(capsys, "cost", "report", "--from-file", str(objects))
    assert table.splitlines()[0].split()[:2] == ["TEAM", "SPENT"]
    assert re.search(r"^research\s+\$312\.00\s+\$32\.00\s+\$60\.00", table, re.M), table
    assert table.splitlines()[-1].startswith("TOTAL")
    csv_out = _run(capsys, "cost", "report", "--from-file", str(objects), "-o", "csv")
    assert csv_out.splitlines()[0].startswith("key,spentUsd,lostToPreemptionUsd")
    assert len(csv_out.splitlines()) == 3


def test_bad_since_is_an_error_not_a_traceback(objects: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["cost", "report", "--from-file", str(objects), "--since", "forever"]) == 2
    assert "--since" in capsys.readouterr().err
    assert cli.main(["cost", "report", "--from-file", str(objects), "--since", "999d"]) == 2


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("chromium is not installed and could not be (hack/dev.sh setup installs it with apt-get as root)")
    return found


def test_html_report_renders_in_headless_chromium_with_no_console_error(
    objects: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "cost.html"
    _run(capsys, "cost", "report", "--from-file", str(objects), "-o", "html", "--out", str(report))
    text = report.read_text()
    assert "http://" not in text.split("<script>", 1)[0] and "<script src" not in text  # nothing fetched
    browser = _chromium()
    proc = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=10000",
            "--dump-dom",
            report.as_uri(),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    console = [line for line in proc.stderr.splitlines() if "CONSOLE" in line]
    assert not console, "\n".join(console)
    dom = proc.stdout
    # plotly draws each chart as an SVG (class main-svg) inside its div: all five rendered.
    for k in range(5):
        chart = re.search(rf'<div id="chart{k}"[^>]*>(.*?)</div>\s*<script', dom, re.S)
        assert chart is not None, f"chart{k} missing"
        assert "main-svg" in chart.group(1), f"chart{k} did not render"
    assert "research" in dom and "$312.00" in dom


def test_no_cluster_is_an_error_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    # No kubeconfig: a runtime error (exit 1, as documented), not a usage error.
    assert cli.main(["cost", "report"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot reach the cluster"), err
    assert "Traceback" not in err


def test_a_deleted_jobs_money_comes_from_the_rollup_and_a_folded_attempt_counts_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from accel_api.costrollup import CostRollup
    from accel_operator.accounting import rollup
    from accel_operator.adapters.kube.costs import ROLLUP_KEY, rollup_json

    old = _ledger("h100-spot", CapacityType.SPOT, 5, 4.0)  # deleted: only in the rollup
    eval_ = _ledger("h100-od", CapacityType.ON_DEMAND, 3, 10.0)  # live, its attempts folded and marked
    stored = rollup.fold(
        CostRollup(),
        rollup.JobId("uid-old", "research", "old", "research", 17.0),
        old.attempts,
        gone=_now(),
        summary=old,
    )
    stored = rollup.fold(stored, rollup.JobId("uid-eval", "research", "eval", "research"), eval_.attempts)
    marked = ledger.mark_rolled_up(eval_, [a.attempt for a in eval_.attempts])
    live = _job("research", "eval", "research", marked)
    live["metadata"]["uid"] = "uid-eval"
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "accel-cost-rollup", "namespace": "accel-system"},
        "data": {ROLLUP_KEY: rollup_json(stored)},
    }
    path = tmp_path / "objects.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [live, configmap]}))
    out = json.loads(_run(capsys, "cost", "report", "--from-file", str(path), "--by", "team", "-o", "json"))
    (research,) = out["rows"]
    assert research["spentUsd"] == pytest.approx(4 * 5 * 4.0 + 4 * 3 * 10.0)  # each once
    assert research["jobs"] == 2
    out = json.loads(_run(capsys, "cost", "report", "--from-file", str(path), "--by", "job", "-o", "json"))
    rows = {r["key"]: r for r in out["rows"]}
    assert rows["research/old"]["spentUsd"] == pytest.approx(80.0)
    assert rows["research/old"]["forecastUsd"] == pytest.approx(17.0)
    assert rows["research/eval"]["spentUsd"] == pytest.approx(120.0)
    out = json.loads(_run(capsys, "cost", "report", "--from-file", str(path), "--by", "pool", "-o", "json"))
    assert {r["key"]: r["spentUsd"] for r in out["rows"]} == {
        "h100-spot": pytest.approx(80.0),
        "h100-od": pytest.approx(120.0),
    }


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
