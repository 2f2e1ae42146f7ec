"""``accelctl cost report`` on what users get wrong and on how a report is cut: a missing or
unreadable input and an output folder that does not exist are one-line errors (exit 2), a job
whose ledger does not validate is named on stderr instead of silently dropped, and the money is
the same whether a namespace's report is cut by team, pool or job (the attempts of its live jobs
folded into the rollup included: before, ``--by team -n NS`` showed them as $0)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from accel_api.costrollup import CostRollup
from accel_api.enums import CapacityType
from accel_api.job import CostStatus
from accel_operator.accounting import accrual, ledger, rollup
from accel_operator.adapters.kube.costs import ROLLUP_KEY, rollup_json
from accel_operator.cli.main import main

NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)
H = dt.timedelta(hours=1)


def _attempt(cost: CostStatus | None, attempt: int, start: dt.datetime, hours: float, pool: str) -> CostStatus:
    end = start + hours * H
    out = ledger.record(cost, ledger.Observation(attempt, pool, CapacityType.SPOT, 2, start, end, 3.6, 9.0))
    return ledger.close(out, ledger.AttemptEnd(attempt, end))


def _job(ns: str, name: str, team: str, cost: CostStatus) -> dict[str, Any]:
    return {
        "apiVersion": "accel.dev/v1alpha1",
        "kind": "AcceleratorJob",
        "metadata": {"namespace": ns, "name": name, "uid": f"uid-{ns}-{name}"},
        "spec": {"team": team},
        "status": {"cost": cost.model_dump(by_alias=True, mode="json", exclude_none=True)},
    }


def _world(tmp_path: Path) -> Path:
    """Namespace a: a live job whose first attempt is folded into the rollup and a deleted job;
    namespace b: a live job of another team. Every figure a round number of dollars."""
    t0 = NOW - 10 * H
    live_a = _attempt(_attempt(None, 0, t0, 1, "p"), 1, t0 + 2 * H, 2, "q")  # $7.20 + $14.40
    gone_a = _attempt(None, 0, t0 + H, 1, "p")  # $7.20, deleted
    live_b = _attempt(None, 0, t0, 3, "p")  # $21.60
    stored = rollup.fold(CostRollup(), rollup.JobId("uid-a-live", "a", "live", "research"), [live_a.attempts[0]])
    live_a = ledger.mark_rolled_up(live_a, [0])
    final = accrual.at_deletion(gone_a, t0 + 3 * H)
    who = rollup.JobId("uid-a-gone", "a", "gone", "research")
    stored = rollup.fold(stored, who, rollup.unfolded(final, ()), gone=t0 + 3 * H, summary=final)
    stored = rollup.fold(stored, rollup.JobId("uid-b-live", "b", "live", "serving"), [])
    docs = [
        {**_job("a", "live", "research", live_a), "metadata": {"namespace": "a", "name": "live", "uid": "uid-a-live"}},
        {**_job("b", "live", "serving", live_b), "metadata": {"namespace": "b", "name": "live", "uid": "uid-b-live"}},
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "accel-cost-rollup", "namespace": "accel-system"},
            "data": {ROLLUP_KEY: rollup_json(stored)},
        },
    ]
    path = tmp_path / "world.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def _total(capsys: pytest.CaptureFixture[str], *args: str) -> float:
    assert main(["cost", "report", "-o", "json", "--since", "2d", *args]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    return float(round(sum(r["spentUsd"] for r in rows), 6))


@pytest.mark.parametrize("namespace", [None, "a", "b"])
def test_a_namespaces_money_is_the_same_by_team_pool_and_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], namespace: str | None
) -> None:
    world = str(_world(tmp_path))
    scope = ["-n", namespace] if namespace else []
    totals = {by: _total(capsys, "--from-file", world, "--by", by, *scope) for by in ("team", "pool", "job")}
    expected = {None: 7.2 + 14.4 + 7.2 + 21.6, "a": 7.2 + 14.4 + 7.2, "b": 21.6}[namespace]
    assert totals == {"team": pytest.approx(expected), "pool": pytest.approx(expected), "job": pytest.approx(expected)}


def test_a_missing_input_is_one_line_naming_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["cost", "report", "--from-file", str(tmp_path / "nope.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"error: --from-file: {tmp_path / 'nope.yaml'}: no such file"
    assert main(["cost", "report", "--from-file", str(tmp_path)]) == 2
    assert "is a folder, not a file" in capsys.readouterr().err
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00")
    assert main(["cost", "report", "--from-file", str(tmp_path / "bin.yaml")]) == 2
    assert "not UTF-8 text" in capsys.readouterr().err


def test_html_into_a_folder_that_does_not_exist_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    world = str(_world(tmp_path))
    out = tmp_path / "no" / "such" / "r.html"
    assert main(["cost", "report", "--from-file", world, "-o", "html", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"the folder {out.parent} does not exist" in err
    assert main(["cost", "report", "--from-file", world, "-o", "html", "--out", str(tmp_path)]) == 2
    assert "is a folder: name a file" in capsys.readouterr().err


def test_a_job_whose_ledger_does_not_validate_is_named_not_dropped_silently(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = {
        "kind": "AcceleratorJob",
        "metadata": {"namespace": "a", "name": "broken"},
        "spec": {"team": "research"},
        "status": {"cost": {"spentUsd": -5, "attempts": "many"}},
    }
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    assert main(["cost", "report", "--from-file", str(path)]) == 0
    err = capsys.readouterr().err
    assert "warning: left out of the report: a/broken: status.cost does not validate" in err
