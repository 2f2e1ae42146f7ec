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
