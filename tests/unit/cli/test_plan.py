"""accelctl plan: every example job plans (exit 0, JSON parses), bad input exits 2 without a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from accel_operator.cli.main import main

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted(
    p
    for p in (ROOT / "examples").glob("*.yaml")
    if any(d and d.get("kind") == "AcceleratorJob" for d in yaml.safe_load_all(p.read_text()))
)
POOL_FILES = sorted(
    p
    for p in (ROOT / "examples").glob("*.yaml")
    if all(d and d.get("kind") == "AcceleratorPool" for d in yaml.safe_load_all(p.read_text()))
)


def test_there_are_examples() -> None:
    assert len(EXAMPLES) >= 4 and POOL_FILES


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_job_plans(example: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(example), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"job", "candidates", "decision"}
    assert isinstance(out["decision"]["schedulable"], bool) and out["decision"]["reason"]
    assert out["job"]["name"]
    assert out["candidates"]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_job_plans_on_the_example_pools(example: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", str(example)]
    for f in POOL_FILES:
        args += ["--pools", str(f)]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "decision: " in text and "RANK" in text


def test_table_names_the_winner(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(ROOT / "examples" / "01-finetune-single-gpu.yaml")]) == 0
    text = capsys.readouterr().out
    assert "decision: schedulable: " in text and "chosen" in text


def test_one_placement(capsys: pytest.CaptureFixture[str]) -> None:
    job = str(ROOT / "examples" / "01-finetune-single-gpu.yaml")
    assert main(["plan", job, "--accelerator", "l4", "--devices", "1", "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["candidates"]) == 1
    assert out["decision"]["schedulable"] is False  # a 1.1B AdamW fine-tune does not fit in 24 GB
    assert "GB per device >" in out["decision"]["reason"]


def test_unschedulable_still_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (
        (ROOT / "examples" / "01-finetune-single-gpu.yaml")
        .read_text()
        .replace("tokens: 200000000", "tokens: 200000000000000")
    )
    f = tmp_path / "job.yaml"
    f.write_text(text + "  deadline: 1h\n")
    assert main(["plan", str(f), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["decision"]["schedulable"] is False
    assert all(c["reasons"] for c in out["candidates"])


# As the accelctl console script runs it (python -m would load cli.main twice, as __main__ too).
ACCELCTL = "import sys; from accel_operator.cli.main import main; sys.exit(main(sys.argv[1:]))"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", ACCELCTL, "plan", *args], capture_output=True, text=True, check=False)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("spec: [a\n", "(yaml) line 2"),
        (
            "apiVersion: accel.dev/v1alpha1\nkind: AcceleratorJob\nmetadata: {name: j}\nspec:\n  team: t\n"
            "  image: i\n  model: {parameters: 1000000}\n  workload: {mode: training, microBatch: 0, tokens: 10}\n",
            "spec.workload.microBatch: must be >= 1 (got 0)",
        ),
        (
            "apiVersion: accel.dev/v1alpha1\nkind: AcceleratorJob\nmetadata: {name: j}\nspec:\n  team: t\n"
            "  image: i\n  model: {parameters: 1000000}\n  workload: {mode: training}\n",
            "training needs workload.tokens",
        ),
        (
            "apiVersion: accel.dev/v1alpha1\nkind: AcceleratorPool\nmetadata: {name: p}\n"
            "spec: {provider: aws, accelerator: l4, devicesPerNode: 4}\n",
            "expected an AcceleratorJob",
        ),
    ],
)
def test_bad_input_exits_2_with_the_field_path(tmp_path: Path, text: str, expected: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    proc = run(str(f))
    assert proc.returncode == 2, proc.stdout
    assert expected in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: ")


def test_missing_file() -> None:
    proc = run("/nonexistent/job.yaml")
    assert proc.returncode == 2 and "no such file" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "extra",
    [
        ["--accelerator", "h100-80gb"],
        ["--devices", "2"],
        ["--accelerator", "h100-80gb", "--devices", "0"],
        ["--spot"],
        ["--catalog", "/nonexistent/catalog.yaml"],
        ["--pools", "/nonexistent/pools.yaml"],
    ],
)
def test_bad_flags_exit_2(extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(ROOT / "examples" / "01-finetune-single-gpu.yaml"), *extra]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_a_bad_catalog_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "cat.yaml"
    f.write_text("accelerators:\n  h100-80gb: {mfu: 2}\n")
    assert main(["plan", str(ROOT / "examples" / "01-finetune-single-gpu.yaml"), "--catalog", str(f)]) == 2
    assert "accelerators.h100-80gb.mfu" in capsys.readouterr().err
