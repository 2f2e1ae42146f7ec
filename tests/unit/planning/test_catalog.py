"""The accelerator catalog: shipped ids and figures, user overrides, errors by field path."""

from pathlib import Path

import pytest

from accel_api import catalog
from accel_api.enums import AcceleratorKind
from tests.support.builders import mi300x_catalog_entry

IDS = (
    "t4",
    "l4",
    "a10g",
    "a100-40gb",
    "a100-80gb",
    "h100-80gb",
    "h200-141gb",
    "b200",
    "rtx-4090",
    "rtx-a6000",
    "l40s",
    "tpu-v4",
    "tpu-v5e",
    "tpu-v5p",
    "tpu-v6e",
)


def test_every_issue_id_is_shipped_with_sane_figures() -> None:
    cat = catalog.default()
    assert set(IDS) <= set(cat.ids())
    for acc in cat:
        assert acc.kind is (AcceleratorKind.TPU if acc.id.startswith("tpu") else AcceleratorKind.GPU)
        assert 8e9 < acc.memory_bytes < 300e9, acc.id
        assert acc.bf16_flops > acc.fp32_flops > 0, acc.id
        assert acc.hbm_bytes_per_second > 1e11, acc.id
        assert acc.intra_node_bytes_per_second >= acc.inter_node_bytes_per_second > 0, acc.id
        assert 0 < acc.mfu <= 1 and 0 < acc.bandwidth_efficiency <= 1, acc.id
        assert acc.price.spot_per_device_hour < acc.price.on_demand_per_device_hour, acc.id
        assert acc.price.as_of and acc.price.source, acc.id
        assert acc.product


def test_h100_is_the_measured_card() -> None:
    h100 = catalog.default().get("h100-80gb")
    assert h100 is not None
    assert h100.memory_bytes == 85520809984
    assert h100.product == "NVIDIA-H100-80GB-HBM3"
    assert h100.devices_per_node == 8


def test_a_user_file_overrides_fields_and_adds_ids(tmp_path: Path) -> None:
    f = tmp_path / "cat.yaml"
    f.write_text(
        "accelerators:\n"
        "  h100-80gb: {price: {spotPerDeviceHour: 1.25}}\n"
        + mi300x_catalog_entry("{onDemandPerDeviceHour: 6.0, spotPerDeviceHour: 2.0, asOf: '2025-06', source: test}")
    )
    cat = catalog.load(f)
    h100 = cat.get("h100-80gb")
    assert h100 is not None
    assert h100.price.spot_per_device_hour == 1.25
    assert h100.price.on_demand_per_device_hour == catalog.default().get("h100-80gb").price.on_demand_per_device_hour  # type: ignore[union-attr]
    assert "mi300x" in cat
    assert "t4" in cat


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("accelerators:\n  new: {kind: gpu}\n", "accelerators.new: a new accelerator needs every field"),
        ("accelerators:\n  h100-80gb: {mfu: 1.5}\n", "accelerators.h100-80gb.mfu: must be in (0, 1]"),
        ("accelerators:\n  h100-80gb: {colour: red}\n", "accelerators.h100-80gb.colour: unknown field"),
        ("accelerators:\n  h100-80gb: {kind: fpga}\n", "accelerators.h100-80gb.kind: must be gpu or tpu"),
        ("accelerators:\n  h100-80gb: {memoryBytes: lots}\n", "memoryBytes: must be a number"),
        ("nothing: here\n", "must be a mapping with an 'accelerators' mapping"),
        ("accelerators: [a\n", "not valid YAML"),
    ],
)
def test_bad_catalog_files_name_the_field(tmp_path: Path, text: str, expected: str) -> None:
    f = tmp_path / "cat.yaml"
    f.write_text(text)
    with pytest.raises(catalog.CatalogError, match=None) as err:
        catalog.load(f)
    assert expected in str(err.value)


def test_missing_file() -> None:
    with pytest.raises(catalog.CatalogError, match="no such file"):
        catalog.load("/nonexistent/catalog.yaml")


def test_default_is_cached() -> None:
    assert catalog.default() is catalog.default()


@pytest.mark.parametrize(
    ("accelerator", "fp8"),
    [
        ("t4", False),  # Turing, compute capability 7.5
        ("a10g", False),  # Ampere GA102, 8.6
        ("a100-40gb", False),  # Ampere GA100, 8.0
        ("a100-80gb", False),
        ("rtx-a6000", False),  # Ampere GA102, 8.6
        ("l4", True),  # Ada, 8.9
        ("rtx-4090", True),
        ("l40s", True),
        ("h100-80gb", True),  # Hopper, 9.0
        ("h200-141gb", True),
        ("b200", True),  # Blackwell, 10.0
    ],
)
def test_fp8_tensor_cores_per_card(accelerator: str, fp8: bool) -> None:
    card = catalog.default().get(accelerator)
    assert card is not None
    assert card.fp8_tensor_cores is fp8
