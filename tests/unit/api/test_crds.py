"""The CRDs on disk are exactly what the models generate, structural, and accept every example."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from accel_api import crdgen, load_documents, parse_resource, registry
from tests.support import structural

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        out.append((path, node))
        for k, v in node.get("properties", {}).items():
            out.extend(_walk(v, f"{path}.{k}"))
        if isinstance(node.get("items"), dict):
            out.extend(_walk(node["items"], f"{path}[]"))
        if isinstance(node.get("additionalProperties"), dict):
            out.extend(_walk(node["additionalProperties"], f"{path}{{}}"))
    return out


def test_crds_on_disk_match_the_models() -> None:
    for name, text in crdgen.render_all().items():
        on_disk = ROOT / "crds" / name
        assert on_disk.is_file(), f"crds/{name} missing: run `accelctl crds`"
        assert on_disk.read_text() == text, f"crds/{name} drifted from the models: run `accelctl crds`"


@pytest.mark.parametrize("kind", registry.KINDS, ids=lambda k: k.kind)
def test_schema_is_structural(kind: registry.Kind) -> None:
    schema = crdgen.openapi_schema(kind)
    for path, node in _walk(schema):
        assert "type" in node, f"{kind.kind}{path}: no type"
        for banned in ("$ref", "anyOf", "oneOf", "allOf", "title", "default", "$defs"):
            assert banned not in node, f"{kind.kind}{path}: {banned} is not allowed in a structural schema"
        assert not ("properties" in node and "additionalProperties" in node), f"{kind.kind}{path}"


def test_crd_has_status_subresource_columns_and_short_names() -> None:
    job = crdgen.crd(registry.JOB)
    version = job["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    names = [c["name"] for c in version["additionalPrinterColumns"]]
    for wanted in ("Phase", "Accelerator", "Devices", "Spot", "Cost", "Age"):
        assert wanted in names
    assert "aj" in job["spec"]["names"]["shortNames"]
    assert job["spec"]["scope"] == "Namespaced"
    assert crdgen.crd(registry.POOL)["spec"]["scope"] == "Cluster"


def test_printer_column_paths_exist_in_the_schema() -> None:
    for kind in registry.KINDS:
        schema = crdgen.openapi_schema(kind)
        for column in kind.columns:
            node: dict[str, Any] = {"properties": {**schema["properties"], "metadata": {"properties": {}}}}
            parts = column.json_path.strip(".").split(".")
            if parts[0] == "metadata":
                continue
            for part in parts:
                assert part in node.get("properties", {}), f"{kind.kind}: column {column.name} -> {column.json_path}"
                node = node["properties"][part]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_is_valid_for_models_and_crd_schema(path: Path) -> None:
    docs = load_documents(path.read_text(), source=path.name)
    assert docs, f"{path.name} holds no document"
    for doc in docs:
        model = parse_resource(doc, source=path.name)
        kind = registry.BY_KIND[doc["kind"]]
        problems = structural.validate(doc, crdgen.openapi_schema(kind))
        assert problems == [], problems
        # The wire form of the model is also what the schema accepts (round trip).
        assert structural.validate(model.to_wire(), crdgen.openapi_schema(kind)) == []


def test_schema_rejects_what_the_models_reject() -> None:
    doc = yaml.safe_load((ROOT / "examples" / "01-finetune-single-gpu.yaml").read_text())
    doc["spec"]["workload"]["microBatch"] = 0
    doc["spec"]["workload"]["precision"] = "fp4"
    problems = structural.validate(doc, crdgen.openapi_schema(registry.JOB))
    assert any("microBatch" in p for p in problems)
    assert any("precision" in p for p in problems)


@pytest.mark.parametrize("kind", registry.KINDS, ids=lambda k: k.kind)
def test_every_field_is_bounded(kind: registry.Kind) -> None:
    """Strings have maxLength (or an enum), lists maxItems, maps maxProperties, numbers both bounds:
    a valid object can never grow the status or kopf's annotation without limit."""
    schema = crdgen.openapi_schema(kind)
    top = {".apiVersion", ".kind", ".metadata"}
    unbounded = []
    for path, node in _walk(schema):
        if path in top:
            continue
        kind_ = node["type"]
        if kind_ == "string" and "maxLength" not in node and "enum" not in node:
            unbounded.append(f"{path}: string without maxLength")
        elif kind_ == "array" and "maxItems" not in node:
            unbounded.append(f"{path}: array without maxItems")
        elif kind_ == "object" and "additionalProperties" in node and "maxProperties" not in node:
            unbounded.append(f"{path}: map without maxProperties")
        elif kind_ == "object" and node.get("x-kubernetes-preserve-unknown-fields"):
            unbounded.append(f"{path}: object that keeps unknown fields")
        elif kind_ in ("integer", "number") and not ("minimum" in node and "maximum" in node):
            unbounded.append(f"{path}: number without minimum and maximum")
    assert unbounded == [], "\n".join(unbounded)
