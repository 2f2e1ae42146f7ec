"""Generates the CustomResourceDefinitions from the pydantic models.

Kubernetes wants *structural* schemas: every node typed, no ``$ref``, ``nullable`` instead of
``anyOf: [X, null]``, no ``additionalProperties`` beside ``properties``, OpenAPI v3.0 style
exclusive bounds. ``render_all`` returns ``{file name: YAML text}``; ``accelctl crds`` writes them
and a unit test fails when the files on disk drift from the models.
"""

from typing import Any

import yaml

from accel_api import patterns, registry, vocabulary

_KEEP_FORMATS = frozenset({"date-time", "int32", "int64", "double", "float", "byte"})
_DROP_KEYS = frozenset({"title", "default", "examples", "$defs", "discriminator"})


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    """Inline every ``$ref`` (pydantic emits them for nested models and enums)."""
    if isinstance(node, dict):
        if "$ref" in node:
            target = defs[node["$ref"].rsplit("/", 1)[-1]]
            merged = {**_resolve(target, defs), **{k: v for k, v in node.items() if k != "$ref"}}
            return _resolve(merged, defs)
        return {k: _resolve(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve(v, defs) for v in node]
    return node


def _structural(node: dict[str, Any]) -> dict[str, Any]:
    node = {k: v for k, v in node.items() if k not in _DROP_KEYS}
    nullable = False
    for key in ("anyOf", "oneOf"):
        if key in node:
            options = [o for o in node.pop(key) if o.get("type") != "null"]
            if len(options) != 1:
                raise ValueError(f"unsupported union in schema: {options}")
            node = {**options[0], **node}
            nullable = True
    if "allOf" in node:
        parts = node.pop("allOf")
        for part in parts:
            node = {**part, **node}
    node = {k: v for k, v in node.items() if k not in _DROP_KEYS}
    keys = node.pop("propertyNames", None)
    by_pattern = node.pop("patternProperties", None)
    if isinstance(by_pattern, dict):
        # pydantic says a map's key pattern as patternProperties (not structural): the values'
        # schema goes to additionalProperties and the key pattern to a CEL rule below.
        if len(by_pattern) != 1:
            raise ValueError(f"unsupported patternProperties in schema: {by_pattern}")
        ((key_pattern, values),) = by_pattern.items()
        node["additionalProperties"] = values
        keys = {**(keys if isinstance(keys, dict) else {}), "pattern": key_pattern}
    if isinstance(keys, dict) and "maxLength" in keys:
        # Structural schemas have no propertyNames: bound the map's keys with a CEL rule instead.
        limit = int(keys["maxLength"])
        node.setdefault("x-kubernetes-validations", []).append(
            {"rule": f"self.all(k, size(k) <= {limit})", "message": f"keys must be at most {limit} characters"}
        )
    if isinstance(keys, dict) and "pattern" in keys:
        pattern = str(keys["pattern"])
        if "'" in pattern:
            raise ValueError(f"a pattern for a CEL raw string has no quote: {pattern}")
        node.setdefault("x-kubernetes-validations", []).append(
            {"rule": f"self.all(k, k.matches(r'{pattern}'))", "message": "keys " + patterns.EXPLAINED[pattern]}
        )
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if "enum" in node and "type" not in node:
        node["type"] = "string"
    if "exclusiveMinimum" in node and not isinstance(node["exclusiveMinimum"], bool):
        node["minimum"] = node["exclusiveMinimum"]
        node["exclusiveMinimum"] = True
    if "exclusiveMaximum" in node and not isinstance(node["exclusiveMaximum"], bool):
        node["maximum"] = node["exclusiveMaximum"]
        node["exclusiveMaximum"] = True
    if "format" in node and node["format"] not in _KEEP_FORMATS:
        del node["format"]
    if "properties" in node:
        node["type"] = "object"
        node.pop("additionalProperties", None)
        node["properties"] = {k: _structural(v) for k, v in node["properties"].items()}
    elif isinstance(node.get("additionalProperties"), dict):
        node["additionalProperties"] = _structural(node["additionalProperties"])
    elif node.get("type") == "object":
        node.pop("additionalProperties", None)
        node["x-kubernetes-preserve-unknown-fields"] = True
    if "items" in node:
        node["items"] = _structural(node["items"])
    if "type" not in node:
        raise ValueError(f"schema node without a type: {node}")
    if nullable:
        node["nullable"] = True
    return node


def openapi_schema(kind: registry.Kind) -> dict[str, Any]:
    raw = kind.model.model_json_schema(by_alias=True, mode="validation")
    resolved = _resolve(raw, raw.get("$defs", {}))
    props = resolved["properties"]
    schema = _structural(
        {
            "type": "object",
            "description": resolved.get("description", ""),
            "properties": {"spec": props["spec"], **({"status": props["status"]} if "status" in props else {})},
            "required": ["spec"],
        }
    )
    schema["properties"] = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        **schema["properties"],
    }
    # The status is written by the operator/agent; null is never stored there.
    schema["properties"].get("status", {}).pop("nullable", None)
    return schema


def crd(kind: registry.Kind) -> dict[str, Any]:
    columns = [
        {
            "name": c.name,
            "type": c.type,
            "jsonPath": c.json_path,
            **({"priority": c.priority} if c.priority else {}),
            **({"description": c.description} if c.description else {}),
        }
        for c in kind.columns
    ]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": kind.crd_name, "labels": {"app.kubernetes.io/part-of": "accel-operator"}},
        "spec": {
            "group": vocabulary.GROUP,
            "scope": "Namespaced" if kind.namespaced else "Cluster",
            "names": {
                "kind": kind.kind,
                "listKind": f"{kind.kind}List",
                "plural": kind.plural,
                "singular": kind.singular,
                "shortNames": list(kind.short_names),
                "categories": ["accel"],
            },
            "versions": [
                {
                    "name": vocabulary.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": openapi_schema(kind)},
                }
            ],
        },
    }


HEADER = "# Generated from the accel_api models by `accelctl crds`. Do not edit by hand.\n"


def render_all() -> dict[str, str]:
    files = {f"{k.plural}.yaml": HEADER + yaml.safe_dump(crd(k), sort_keys=False, width=120) for k in registry.KINDS}
    files["kustomization.yaml"] = HEADER + yaml.safe_dump(
        {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [f"{k.plural}.yaml" for k in registry.KINDS],
        },
        sort_keys=False,
    )
    return files
