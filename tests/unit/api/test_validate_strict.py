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


# Found by the differential test (tests/cluster/test_validate_differential.py): what the API
# server does on create besides the CRD schema.
@pytest.mark.parametrize(
    ("old", "new", "accepted", "problem"),
    [
        # A null in a field the schema does not make nullable is dropped: the field is left out.
        ("objective: cost", "objective: null", True, ""),
        ("seqLen: 2048", "seqLen: ~", True, ""),
        ("spot: {policy: never}", "spot: null", True, ""),
        # A null in a nullable field with an enum is refused (null is not one of its values).
        ("mlp: swiglu}", "mlp: swiglu, norm: null}", False, "spec.model.architecture.norm: must be one of"),
        # The API server's metadata rules.
        ("name: tinyllama-finetune", "name: TinyLlama", False, "metadata.name: must be a lowercase DNS name"),
        ("name: tinyllama-finetune", "name: a..b", False, "metadata.name: must be a lowercase DNS name"),
        ("  name: tinyllama-finetune\n", "", False, "metadata.name: is required"),
        ("namespace: ml-research", "namespace: ml-research\n  labels: {'bad key!': v}", False, "metadata.labels: key"),
        ("namespace: ml-research", "namespace: ml-research\n  labels: {a: -a}", False, "metadata.labels.'a': must"),
        ("namespace: ml-research", "namespace: ml-research\n  labels: {a: null}", True, ""),
        ("namespace: ml-research", "namespace: ml-research\n  annotations: {a/b/c: v}", False, "at most one '/'"),
        ("namespace: ml-research", "namespace: ml-research\n  bogus: 1", False, "metadata.'bogus': is not a"),
        ("namespace: ml-research", "namespace: ml-research\n  finalizers: [x!]", False, "metadata.finalizers"),
    ],
)
def test_nulls_and_metadata_as_the_api_server_reads_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, accepted: bool, problem: str
) -> None:
    assert old in JOB, old
    rc, err = _validate(tmp_path, JOB.replace(old, new), capsys)
    assert (rc == 0) is accepted and problem in err, err


def test_a_huge_annotation_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = JOB.replace("namespace: ml-research", "namespace: ml-research\n  annotations: {a: " + "x" * 262_144 + "}")
    rc, err = _validate(tmp_path, text, capsys)
    assert rc == 2 and "metadata.annotations: at most 262144 bytes in all (got 262145)" in err, err


@pytest.mark.parametrize(
    ("plain", "value"),
    [
        ("0o17", 15),  # YAML 1.1: text; go-yaml: an integer
        ("y", True),  # YAML 1.1: text; go-yaml: a boolean
        ("N", False),
        ("1:30", "1:30"),  # YAML 1.1: sexagesimal 90; go-yaml: text
        ("2024-01-01", "2024-01-01"),  # go-yaml keeps a timestamp as text
        ("1e5", 100000.0),
        ("1e400", "1e400"),  # beyond float64: text
        ("0x" + "F" * 17, "0x" + "F" * 17),  # beyond uint64 and no float: text
        ("18446744073709551615", 2**64 - 1),  # a uint64
        ("99999999999999999999", 1e20),  # beyond uint64: a float
        ("08", 8.0),  # not octal: a float
        ("1_000", 1000),
        ("~", None),
    ],
)
def test_plain_scalars_are_typed_as_the_api_server_types_them(plain: str, value: object) -> None:
    (doc,) = load_documents(f"v: {plain}\n")
    assert doc["v"] == value and type(doc["v"]) is type(value), doc


def test_a_policy_without_spec_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The model defaults an empty policy; the CRD requires spec, so the API server refuses it.
    text = "apiVersion: accel.dev/v1alpha1\nkind: AcceleratorPolicy\nmetadata: {name: p}\n"
    rc, err = _validate(tmp_path, text, capsys)
    assert rc == 2 and "spec: is required (write spec: {} for an empty one)" in err, err
    assert _validate(tmp_path, text + "spec: {}\n", capsys)[0] == 0


@pytest.mark.parametrize(
    ("keys", "refused"),
    [
        ("y: a\n  yes: b", True),  # both the boolean true, as go-yaml reads them
        ("1: a\n  01: b", True),  # both the integer 1
        ("0x10: a\n  16: b", True),
        ("1: a\n  '1': b", False),  # an integer and a text: two keys to the API server's reader
    ],
)
def test_keys_are_compared_as_typed_values(keys: str, refused: bool) -> None:
    text = f"m:\n  {keys}\n"
    if refused:
        with pytest.raises(InvalidResource) as info:
            load_documents(text)
        assert any("m: must not give a key twice" in p for p in info.value.problems), info.value.problems
    else:
        load_documents(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("v:\tx\n", {"v": "x"}),  # a tab after a key: white space to go-yaml
        ("v: x\t\n", {"v": "x"}),
        ("v: x\t# c\n", {"v": "x"}),
        ("v: a\tb\n", {"v": "a\tb"}),  # inside a plain scalar
        ("v: {a:\t1,\tb: 2}\n", {"v": {"a": 1, "b": 2}}),
    ],
)
def test_tabs_are_read_as_the_api_server_reads_them(text: str, value: object) -> None:
    assert load_documents(text) == [value]


@pytest.mark.parametrize("text", ["\tv: x\n", "v:\n- \tx\n", "v:\n-\tx\n", "%YAML 1.2\n---\nv: x\n"])
def test_an_indenting_tab_and_a_yaml_1_2_directive_are_refused(text: str) -> None:
    with pytest.raises(InvalidResource):
        load_documents(text)
