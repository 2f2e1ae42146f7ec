"""``accelctl validate`` refuses what the API server refuses: values of the wrong JSON type (the
models alone would read ``true`` or ``"4"`` as a number), a key given twice (PyYAML keeps the
last), and YAML merge keys in a spec."""

from pathlib import Path

import pytest
import yaml

from accel_api import InvalidResource, load_documents, parse_resource
from accel_operator.cli.main import main

ROOT = Path(__file__).resolve().parents[3]
JOB = (ROOT / "examples" / "01-finetune-single-gpu.yaml").read_text()


def _validate(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    path = tmp_path / "doc.yaml"
    path.write_text(text)
    rc = main(["validate", str(path)])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("tokens: 200000000", "tokens: true", "spec.workload.tokens: must be a whole number (got True)"),
        ("microBatch: 4", 'microBatch: "4"', "spec.workload.microBatch: must be a whole number (got '4')"),
        ("microBatch: 4", "microBatch: 4\n    gradientCheckpointing: 1", "spec.workload.gradientCheckpointing"),
    ],
)
def test_wrong_json_types_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, problem: str
) -> None:
    assert old in JOB, old
    doc = next(d for d in yaml.safe_load_all(JOB.replace(old, new)) if d)
    parse_resource(doc)  # the models alone are lax: the operator reads what the API server typed
    rc, err = _validate(tmp_path, JOB.replace(old, new), capsys)
    assert rc == 2 and problem in err, err


def test_whole_floats_are_integers_and_the_examples_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _validate(tmp_path, JOB.replace("microBatch: 4", "microBatch: 4.0"), capsys)[0] == 0
    assert _validate(tmp_path, JOB, capsys)[0] == 0


def test_a_key_given_twice_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = JOB.replace("  team: research\n", "  team: research\n  team: serving\n")
    rc, err = _validate(tmp_path, text, capsys)
    assert rc == 2 and "spec: must not give a key twice (got 'team'" in err, err


def test_a_merge_key_is_refused(tmp_path: Path) -> None:
    text = "a: &base {layers: 2}\nspec:\n  <<: *base\n"
    with pytest.raises(InvalidResource) as info:
        load_documents(text)
    assert any("spec: must not use a YAML merge key (<<)" in p for p in info.value.problems), info.value.problems
