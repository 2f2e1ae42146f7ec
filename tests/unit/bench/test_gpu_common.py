"""bench/gpu/common.py, the helpers the GPU measurement scripts share, without torch: the card's
catalog id, the size label, the model configuration, the environment fields (names and order, as
the rows carry them), the rows file, ``--only``, a launch that dies, the timed training step. The scripts
themselves run on a GPU machine."""

from __future__ import annotations

import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from bench.gpu import common


@pytest.mark.parametrize(
    ("name", "cid"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-80gb"),
        ("NVIDIA H200", "h200-141gb"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA A100 80GB PCIe", "a100-80gb"),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA GeForce RTX 4090", None),
    ],
)
def test_a_card_name_gives_its_catalog_id(name: str, cid: str | None) -> None:
    assert common.catalog_id(name) == cid


@pytest.mark.parametrize(
    ("kind", "n_params", "label"),
    [("llama", 1_100_048_384, "llama-1.1b"), ("gpt2", 124_439_808, "gpt2-124m"), ("llama", 999_999_999, "llama-1000m")],
)
def test_the_size_label(kind: str, n_params: int, label: str) -> None:
    assert common.arch_label(kind, n_params) == label


class _Recorder:
    """Stands in for ``transformers``: each config class returns what it was given."""

    def LlamaConfig(self, **kw: Any) -> dict[str, Any]:  # noqa: N802 - the name transformers uses
        return {"class": "llama", **kw}

    def GPT2Config(self, **kw: Any) -> dict[str, Any]:  # noqa: N802
        return {"class": "gpt2", **kw}


def _cfg(kind: str) -> Any:
    dims = {"hidden": 2048, "inter": 5632, "layers": 22, "heads": 32, "kv_heads": 4, "vocab": 32000}
    return common.hf_config(_Recorder(), kind=kind, positions=4096, use_cache=False, **dims)


def test_a_llama_config_has_every_dimension_and_untied_embeddings() -> None:
    assert _cfg("llama") == {
        "class": "llama",
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_hidden_layers": 22,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
        "use_cache": False,
    }


def test_a_gpt2_config_has_no_mlp_width_or_kv_heads() -> None:
    assert _cfg("gpt2") == {
        "class": "gpt2",
        "n_embd": 2048,
        "n_layer": 22,
        "n_head": 32,
        "vocab_size": 32000,
        "n_positions": 4096,
        "use_cache": False,
    }


def _torch(nccl: Any) -> Any:
    props = SimpleNamespace(name="NVIDIA H100 80GB HBM3", multi_processor_count=132, total_memory=85 * 10**9)

    def version() -> Any:
        if isinstance(nccl, Exception):
            raise nccl
        return nccl

    cuda = SimpleNamespace(
        current_device=lambda: 0, get_device_properties=lambda i: props, nccl=SimpleNamespace(version=version)
    )
    backends = SimpleNamespace(cuda=SimpleNamespace(matmul=SimpleNamespace(allow_tf32=False)))
    return SimpleNamespace(cuda=cuda, backends=backends, __version__="2.9.0")


TRANSFORMERS = SimpleNamespace(__version__="4.57.0")


def test_a_single_process_records_the_card_and_versions_only() -> None:
    env = common.environment(_torch((2, 27, 3)), TRANSFORMERS)
    assert list(env.items()) == [
        ("accelerator", "h100-80gb"),
        ("gpu", "NVIDIA H100 80GB HBM3"),
        ("sms", 132),
        ("torch", "2.9.0"),
        ("transformers", "4.57.0"),
        ("tf32_matmul", False),
    ]


@pytest.mark.parametrize(
    ("distributed", "nccl", "shown"),
    [
        (True, (2, 27, 3), "2.27.3"),
        (True, 22703, "22703"),
        (True, RuntimeError("no nccl"), None),
        (False, (2, 27, 3), None),
    ],
)
def test_a_rank_records_the_memory_and_nccl_too(distributed: bool, nccl: Any, shown: str | None) -> None:
    env = common.environment(_torch(nccl), TRANSFORMERS, distributed=distributed)
    assert list(env) == ["accelerator", "gpu", "sms", "gpu_mem_total", "torch", "transformers", "nccl", "tf32_matmul"]
    assert env["gpu_mem_total"] == 85 * 10**9 and env["nccl"] == shown


def test_rows_are_appended_and_read_back(tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    assert common.rows(out) == []
    common.append_row(out, {"config": "a", "devices": 2})
    common.append_row(out, {"config": "b", "peak_alloc": 1})
    assert common.rows(out) == [{"config": "a", "devices": 2}, {"config": "b", "peak_alloc": 1}]
    assert out.read_text(encoding="utf-8").count("\n") == 2


def test_only_picks_in_its_own_order_and_names_the_unknown() -> None:
    configs = [SimpleNamespace(name=n) for n in ("a", "b", "c")]
    assert common.chosen(configs, None) == (configs, [])
    picked, unknown = common.chosen(configs, " c, a ,x,,")
    assert [c.name for c in picked] == ["c", "a"] and unknown == ["x"]


def test_a_config_from_a_scripts_shape_is_the_config_from_its_fields() -> None:
    shape = types.SimpleNamespace(hidden=2048, inter=5632, layers=22, heads=32, kv_heads=4, vocab=32000)
    for kind in ("llama", "gpt2"):
        assert common.hf_config_of(_Recorder(), shape, kind=kind, positions=4096) == _cfg(kind)


def test_a_relaunch_records_the_configuration_a_dead_launch_was_running_and_goes_on() -> None:
    configs = [SimpleNamespace(name=n) for n in ("a", "b", "c", "d")]
    rows: set[str] = set()
    launches: list[list[str]] = []
    died: list[tuple[str, int]] = []

    def launch(names: list[str]) -> int:
        launches.append(names)
        if names[:2] == ["a", "b"]:  # a's row is written, then b kills the launch
            rows.add("a")
            return 137
        rows.update(names)
        return 0

    def record(c: Any, rc: int) -> None:
        died.append((c.name, rc))
        rows.add(c.name)

    rc = common.relaunch(configs, launch=launch, done=lambda: set(rows), died=record)
    assert (rc, died, launches) == (1, [("b", 137)], [["a", "b", "c", "d"], ["c", "d"]])
    assert rows == {"a", "b", "c", "d"}


def test_a_relaunch_gives_up_after_three_deaths() -> None:
    configs = [SimpleNamespace(name=n) for n in "abcde"]
    left: list[list[Any]] = []
    rc = common.relaunch(configs, launch=lambda names: 1, done=set, died=lambda c, rc: None, gave_up=left.append)
    assert rc == 1 and [[c.name for c in cs] for cs in left] == [["c", "d", "e"]]


def test_timed_steps_synchronise_around_each_step_and_return_the_last_result() -> None:
    calls: list[str] = []
    torch = SimpleNamespace(cuda=SimpleNamespace(synchronize=lambda: calls.append("sync")))
    results = iter([1, 2, 3])

    def step() -> int:
        calls.append("step")
        return next(results)

    times, last = common.timed_steps(torch, step, 3, before=lambda i: calls.append(f"before{i}"))
    assert len(times) == 3 and all(t >= 0 for t in times) and last == 3
    assert calls[:4] == ["before0", "sync", "step", "sync"] and calls.count("step") == 3


def test_a_train_step_runs_forward_backward_step_and_drops_the_gradients() -> None:
    calls: list[str] = []
    loss = SimpleNamespace(backward=lambda: calls.append("backward"))

    def model(*, input_ids: Any, labels: Any) -> Any:
        calls.append("forward")
        assert input_ids is labels
        return SimpleNamespace(loss=loss)

    opt = SimpleNamespace(step=lambda: calls.append("step"), zero_grad=lambda set_to_none: calls.append("zero"))
    assert common.train_step(SimpleNamespace(), model, object(), opt, autocast=False) is loss
    assert calls == ["forward", "backward", "step", "zero"]
