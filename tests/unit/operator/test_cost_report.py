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
    assert table.splitlines()[0].startswith("Cost by team, ")  # the period and the currency
    assert table.splitlines()[1].split()[:2] == ["TEAM", "SPENT"]
    assert re.search(r"^research\s+\$312\.00\s+\$32\.00\s+\$60\.00", table, re.M), table
    assert re.search(r"^TOTAL\s+\$352\.00\s", table, re.M), table
    csv_out = _run(capsys, "cost", "report", "--from-file", str(objects), "-o", "csv")
    assert csv_out.splitlines()[0].startswith("key,spentUsd,lostToPreemptionUsd")
    assert len(csv_out.splitlines()) == 4  # the header, two teams, the totals row
    assert csv_out.splitlines()[-1].startswith("TOTAL,352.0,")


def test_bad_since_is_an_error_not_a_traceback(objects: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["cost", "report", "--from-file", str(objects), "--since", "forever"]) == 2
    assert "--since" in capsys.readouterr().err
    assert cli.main(["cost", "report", "--from-file", str(objects), "--since", "999d"]) == 2


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("chromium is not installed and could not be (hack/dev.sh setup installs it with apt-get as root)")
    return found


def _headless(browser: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
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
            *args,
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HOME": str(tmp_path)},
    )


HTML_LIMIT_BYTES = 1_500_000  # 4.85 MB before, 99% of it plotly.js inline


def test_html_report_renders_in_headless_chromium_with_no_console_error(
    objects: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "cost.html"
    _run(capsys, "cost", "report", "--from-file", str(objects), "-o", "html", "--out", str(report))
    text = report.read_text()
    assert report.stat().st_size < HTML_LIMIT_BYTES, report.stat().st_size
    assert "<script" not in text and "http://" not in text and "https://" not in text  # nothing run or fetched
    browser = _chromium()
    proc = _headless(browser, tmp_path, "--dump-dom", report.as_uri())
    assert proc.returncode == 0, proc.stderr[-3000:]
    console = [line for line in proc.stderr.splitlines() if "CONSOLE" in line]
    assert not console, "\n".join(console)
    dom = proc.stdout
    # Each chart is an SVG with its bars: all five drew something.
    for k in range(5):
        chart = re.search(rf'<svg class="chart" id="chart{k}"[^>]*>(.*?)</svg>', dom, re.S)
        assert chart is not None, f"chart{k} missing"
        assert 'class="bar"' in chart.group(1), f"chart{k} has no bars"
    assert "research" in dom and "$312.00" in dom


def _png_colours(png: bytes, wanted: set[tuple[int, int, int]]) -> dict[tuple[int, int, int], int]:
    """How many pixels of a (non-interlaced, 8-bit RGB or RGBA) PNG have each of ``wanted`` colours."""
    import struct
    import zlib

    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, data, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind, body = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            data += body
    raw = zlib.decompress(data)
    stride = width * channels
    prev = bytearray(stride)
    counts = dict.fromkeys(wanted, 0)
    for y in range(height):
        start = y * (stride + 1)
        filt, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            if filt == 1:
                line[i] = (line[i] + a) & 255
            elif filt == 2:
                line[i] = (line[i] + b) & 255
            elif filt == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif filt == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        for x in range(0, stride, channels):
            pixel = (line[x], line[x + 1], line[x + 2])
            if pixel in counts:
                counts[pixel] += 1
        prev = line
    return counts


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    return int(hex_colour[1:3], 16), int(hex_colour[3:5], 16), int(hex_colour[5:7], 16)


def test_a_screenshot_shows_the_totals_row_and_the_price_table(
    objects: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from accel_operator.cli import costhtml

    report = tmp_path / "cost.html"
    _run(capsys, "cost", "report", "--from-file", str(objects), "-o", "html", "--out", str(report))
    browser = _chromium()
    shot = tmp_path / "shot.png"
    proc = _headless(browser, tmp_path, f"--screenshot={shot}", "--window-size=1280,900", report.as_uri())
    assert proc.returncode == 0 and shot.exists(), proc.stderr[-3000:]
    # The totals row and the price table's header have colours of their own: pixels of both are
    # on screen, in the first screenful (a whole row's width of each, at least).
    total, prices = _rgb(costhtml.TOTAL_BACKGROUND), _rgb(costhtml.PRICES_BACKGROUND)
    counts = _png_colours(shot.read_bytes(), {total, prices})
    assert counts[total] > 500 * 10, counts
    assert counts[prices] > 500 * 10, counts


def test_charts_keep_one_colour_per_meaning_and_short_windows_go_by_hour(
    objects: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from accel_operator.cli.svgchart import MEANING, TEAMS

    assert not set(TEAMS) & set(MEANING.values())
    report = tmp_path / "cost.html"
    _run(capsys, "cost", "report", "--from-file", str(objects), "--since", "1d", "-o", "html", "--out", str(report))
    page = report.read_text()
    charts = dict(re.findall(r'<svg class="chart" id="(chart\d)"[^>]*>(.*?)</svg>', page, re.S))
    fills: dict[str, set[str]] = {}
    for chart_id, svg in charts.items():
        for series, fill in re.findall(r'<rect class="bar" data-series="([^"]+)"[^>]* fill="(#[0-9a-f]{6})"', svg):
            fills.setdefault(series, set()).add(fill)
            if chart_id == "chart0":  # teams: their own palette
                assert fill in TEAMS and fill not in MEANING.values(), (series, fill)
    assert fills["spent"] == {MEANING["spent"]}  # the same blue in the three charts that show it
    assert fills["lost to preemption"] == {MEANING["lost"]}
    assert fills["idle"] == {MEANING["idle"]}
    assert fills["forecast for the whole job"] == {MEANING["forecast"]}
    # A one-day window: hour buckets (the jobs ran over the last 16 hours, so many hours hold money).
    hours = set(re.findall(r"<title>[^<]*?, (\d\d-\d\d \d\d:00): \$", charts["chart0"]))
    assert len(hours) >= 10, hours
    assert "USD per hour" in charts["chart0"]
    assert "log scale" in charts["chart4"]
    # A 30-day window: day buckets.
    _run(capsys, "cost", "report", "--from-file", str(objects), "--since", "30d", "-o", "html", "--out", str(report))
    assert "USD per day" in report.read_text()


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
    assert rows["research/old"]["forecastWholeJobUsd"] == pytest.approx(17.0)
    assert rows["research/old"]["spentToDateWholeJobUsd"] == pytest.approx(80.0)
    assert rows["research/eval"]["spentUsd"] == pytest.approx(120.0)
    out = json.loads(_run(capsys, "cost", "report", "--from-file", str(path), "--by", "pool", "-o", "json"))
    assert {r["key"]: r["spentUsd"] for r in out["rows"]} == {
        "h100-spot": pytest.approx(80.0),
        "h100-od": pytest.approx(120.0),
    }


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def test_the_largest_html_report_stays_under_the_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The charts are bounded, whatever the cluster holds: 20 teams (7 drawn, the rest as one
    # "other teams" series) over a 366-day window by day, and the 50 costliest of 120 jobs.
    now = _now()
    items = []
    for j in range(120):
        start = now - dt.timedelta(days=365) + dt.timedelta(hours=j)
        end = start + dt.timedelta(days=300)
        cost = ledger.record(None, ledger.Observation(0, f"pool-{j % 9}", CapacityType.SPOT, 8, start, end, 3.0, 9.0))
        cost = ledger.close(cost, ledger.AttemptEnd(0, end)).model_copy(update={"forecast_usd": 50_000.0 + j})
        items.append(_job(f"ns-{j % 20}", f"job-{j:03d}-{'x' * 40}", f"team-{j % 20:02d}-{'y' * 40}", cost))
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    report = tmp_path / "big.html"
    _run(capsys, "cost", "report", "--from-file", str(path), "--since", "366d", "-o", "html", "--out", str(report))
    text = report.read_text()
    assert report.stat().st_size < HTML_LIMIT_BYTES, report.stat().st_size
    assert "13 other teams" in text
    chart0 = re.search(r'<svg class="chart" id="chart0"[^>]*>(.*?)</svg>', text, re.S)
    assert chart0 is not None and len(re.findall(r'data-series="', chart0.group(1))) > 300 * 8
