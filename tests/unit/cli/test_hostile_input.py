"""Hostile input through accelctl validate / plan / plan -o json, in process: a fixed corpus of
known attacks and Hypothesis-drawn mutations of the examples. Every run must end cleanly (exit 0
or 2, no traceback), print at most 20× its input (+4 KiB), no NaN/Infinity in JSON, and name a
field path on every error line. ``bench/fuzz_cli.py`` runs the same checks on 10,000+ documents."""

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accel_operator.cli.main import main
from tests.support import hostile

_DOCS = hostile.example_docs()


def _check(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / "doc.yaml"
    path.write_text(text, encoding="utf-8")
    size = len(text.encode())
    broken: list[str] = []
    for command, argv in hostile.commands(str(path)):
        result = hostile.judge(hostile.run_cli(main, argv, command), size, str(path))
        broken.extend(f"{command}: {p}" for p in result.problems)
    assert broken == [], f"{name}: {broken}"


@pytest.mark.parametrize(("name", "text"), hostile.CORPUS, ids=[n for n, _ in hostile.CORPUS])
def test_hostile_corpus(tmp_path: Path, name: str, text: str) -> None:
    # How long each input takes is a figure of bench/fuzz_cli.py, not a timed assertion here.
    _check(tmp_path, name, text)


def test_corpus_cases_are_refused_with_the_expected_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expected = {
        "billion-laughs": "values once aliases are expanded",
        "deep-flow-seq-500": "must be nested at most 64 levels deep",
        # go-yaml (the API server's reader) reads a number beyond int64, uint64 and float64 as text.
        "huge-int-5000": "spec.workload.tokens: must be a whole number (got '9999",
        "bad-int-tag": "spec.workload.tokens: must be a valid integer (got '0xZZ'",
        "bad-bool-tag": "spec.workload.gradientCheckpointing: must be a valid boolean",
        "bad-timestamp-tag": "spec.deadline: must be a valid timestamp",
        "nan-maxcost": "spec.maxCost: must be a finite number (got nan)",
        "1e308-maxcost": "spec.maxCost: must be <= 1000000000.0",
        "1e400-maxcost": "spec.maxCost: must be a number (got '1.0e+400')",
        "deadline-0s": "spec.deadline: must be more than 0s",
        "deadline-200kb": "spec.deadline: must have at most 32 characters (got '1111",
        "tpu-topology-0x4": "spec.tpuTopology: must be a TPU topology",
        "pool-price-1e308": "spec.price.spotPerDeviceHour: must be <= 1000.0",
        "checkpoint-traversal": "spec.checkpoint.uri: must stay inside its bucket or claim",
        "env-ld-preload": "spec.env[0].name: 'LD_PRELOAD' is reserved",
        "many-unknown-keys": "... and 1980 more",
        "text-over-1mib": "(document): at most 1048576 characters of YAML (got at least 1048577)",
        "nodes-9k": "spec.args: must have at most 128 items",
    }
    corpus = dict(hostile.CORPUS)
    for name, line in expected.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(corpus[name])
        assert main(["validate", str(path)]) == 2
        err = capsys.readouterr().err
        assert line in err, f"{name}: {err[:500]}"
        assert len(err) < 8192, f"{name}: {len(err)} bytes of errors"


def test_validate_prints_each_resource_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text(hostile.EXAMPLES["10-pool-h100-spot.yaml"])
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"{path}: AcceleratorPool/h100-spot is valid", f"{path}: AcceleratorPool/h100-on-demand is valid"]


_VALUES = st.one_of(
    st.sampled_from(hostile.HOSTILE_VALUES),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.text(max_size=200),
    st.lists(st.integers(), max_size=5),
)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    doc=st.sampled_from(_DOCS),
    changes=st.lists(
        st.tuples(st.sampled_from(hostile.OPERATIONS), st.integers(0, 10_000), _VALUES), min_size=1, max_size=3
    ),
)
def test_mutated_examples_fail_cleanly(tmp_path: Path, doc: dict[str, Any], changes: list[Any]) -> None:
    for op, where, value in changes:
        doc = hostile.mutate(doc, op, where, value)
    _check(tmp_path, "mutation", hostile.render(doc))


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=300))
def test_arbitrary_text_fails_cleanly(tmp_path: Path, text: str) -> None:
    _check(tmp_path, "text", text)


CATALOGS = [
    "accelerators:\n  h100-80gb:\n    mfu: .nan\n",
    "accelerators:\n  h100-80gb:\n    bf16Flops: .inf\n",
    "accelerators:\n  h100-80gb:\n    interNodeBytesPerSecond: 0\n",
    "accelerators:\n  h100-80gb:\n    intraNodeBytesPerSecond: 0\n",
    "accelerators:\n  h100-80gb:\n    memoryBytes: .nan\n",
    "accelerators:\n  h100-80gb:\n    devicesPerNode: 1e308\n",
    "accelerators:\n  h100-80gb:\n    kernelSeconds: 1e308\n",
    "accelerators:\n  h100-80gb:\n    price: {spotPerDeviceHour: 1e308}\n",
    "accelerators:\n  h100-80gb:\n    memoryBytes: !!int 0xZZ\n",
    "accelerators:\n  h100-80gb:\n    memoryBytes: " + "9" * 5000 + "\n",
    hostile.CORPUS[0][1],
    "a: &a [1,2,3,4,5,6,7,8,9]\n"
    + "".join(f"b{i}: &b{i} [" + ",".join(["*a" if i == 0 else f"*b{i - 1}"] * 9) + "]\n" for i in range(9)),
]


@pytest.mark.parametrize("text", CATALOGS)
def test_hostile_catalog_is_a_usage_error(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> None:
    cat = tmp_path / "catalog.yaml"
    cat.write_text(text)
    job = str(hostile.ROOT / "examples" / "02-multinode-spot-training.yaml")
    for extra in ([], ["-o", "json"]):
        assert main(["plan", job, "--catalog", str(cat), *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --catalog: "), err
        assert len(err) < 1024
