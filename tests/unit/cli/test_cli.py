"""accelctl on good and bad input: field paths, exit codes, never a traceback."""

import subprocess
import sys
from pathlib import Path

import pytest

from accel_operator.cli.main import main

ROOT = Path(__file__).resolve().parents[3]


def test_validate_examples(capsys: pytest.CaptureFixture[str]) -> None:
    files = sorted(str(p) for p in (ROOT / "examples").glob("*.yaml"))
    assert main(["validate", *files]) == 0
    assert capsys.readouterr().out.count("is valid") >= 9


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("spec: [a\n", "(yaml) line 2"),
        ("- 1\n- 2\n", "must be a mapping"),
        (
            "apiVersion: accel.dev/v1alpha1\nkind: AcceleratorPool\nspec: {provider: aws, accelerator: l4, "
            "devicesPerNode: 0, colour: red}\n",
            "spec.devicesPerNode: must be >= 1 (got 0)",
        ),
        (
            "apiVersion: accel.dev/v1alpha1\nkind: AcceleratorPool\nspec: {provider: aws, accelerator: l4, "
            "devicesPerNode: 4, colour: red}\n",
            "spec.colour: unknown field",
        ),
        (
            "apiVersion: accel.dev/v1alpha1\nkind: AcceleratorPool\nspec: {provider: azure, accelerator: l4, "
            "devicesPerNode: 4}\n",
            "spec.provider: must be one of 'aws', 'gcp' or 'onprem' (got 'azure')",
        ),
        ("", "the file holds no resource"),
    ],
)
def test_bad_input_exits_2_with_the_field_path(tmp_path: Path, text: str, expected: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "accel_operator.cli.main", "validate", str(f)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert expected in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: ")


def test_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "/nonexistent/job.yaml"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_crds_check_detects_drift(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["crds", "--out", str(tmp_path)]) == 0
    assert main(["crds", "--check", "--out", str(tmp_path)]) == 0
    (tmp_path / "acceleratorjobs.yaml").write_text("# edited by hand\n")
    assert main(["crds", "--check", "--out", str(tmp_path)]) == 1
    assert "out of date" in capsys.readouterr().err


_SPOT_JOB = """apiVersion: accel.dev/v1alpha1
kind: AcceleratorJob
metadata: {name: j}
spec:
  team: serving
  image: x
  model: {parameters: 1000000}
  workload: {tokens: 1000}
  placement: {pools: [h100-spot]}
  spot: {policy: prefer}
"""


def test_validate_with_policy_prints_each_violation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(_SPOT_JOB)
    policy = str(ROOT / "examples" / "20-policy.yaml")
    assert main(["validate", "--policy", policy, "--namespace-team", "research", str(job)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"error: {job}: AcceleratorJob/j: spec.team: must be 'research', the team of its namespace (got 'serving') "
        "(rule namespace-team); fix: set spec.team to 'research', or submit in a namespace labelled "
        "accel.dev/team='serving'",
        f"error: {job}: AcceleratorJob/j: spec.checkpoint: required for spot jobs by policy 'platform-defaults' "
        "(rule spot-needs-checkpoint); fix: add spec.checkpoint with an s3:// or pvc:// uri, or set "
        "spec.spot.policy: never",
        f"error: {job}: AcceleratorJob/j: spec.placement.pools[0]: team 'serving' may not use pool 'h100-spot' by "
        "policy 'platform-defaults' (rule pool-access); fix: name only pools granted to the team: h100-on-demand, "
        "l4-on-demand, tpu-v5e-spot",
    ]


def test_validate_examples_obey_the_example_policy(capsys: pytest.CaptureFixture[str]) -> None:
    files = sorted(str(p) for p in (ROOT / "examples").glob("*.yaml"))
    assert main(["validate", "--policy", str(ROOT / "examples" / "20-policy.yaml"), *files]) == 0
    assert capsys.readouterr().out.count("obeys 1 policy") == 4


def test_validate_policy_file_must_hold_policies(capsys: pytest.CaptureFixture[str]) -> None:
    pool = str(ROOT / "examples" / "11-pool-l4-on-demand.yaml")
    assert main(["validate", "--policy", pool, pool]) == 2
    assert "--policy takes AcceleratorPolicy objects" in capsys.readouterr().err


def test_validate_without_policy_ignores_policy_rules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(_SPOT_JOB)
    assert main(["validate", str(job)]) == 0
    assert "is valid" in capsys.readouterr().out
