"""A small validator for Kubernetes structural (OpenAPI v3.0) schemas, for unit tests.

It checks what the API server checks for our CRDs — types, required fields, enums, bounds,
patterns (also negated with ``not``), nullable, maps and lists and their sizes — and reports
unknown fields (the server would prune them), so a document that passes here is accepted as
written by a real API server.
"""

import re
from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def validate(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Problems with ``value`` against ``schema``; empty when it conforms."""
    where = path or "(root)"
    if value is None:
        return [] if schema.get("nullable") else [f"{where}: null is not allowed"]
    kind = schema.get("type")
    if kind is None:
        return [f"{where}: schema node has no type"]
    ok = isinstance(value, _TYPES[kind]) and not (kind in ("integer", "number") and isinstance(value, bool))
    if not ok:
        return [f"{where}: expected {kind}, got {type(value).__name__}"]
    problems: list[str] = []
    negated = schema.get("not", {})
    if isinstance(value, str) and "pattern" in negated and re.search(negated["pattern"], value):
        problems.append(f"{where}: {value!r} matches the forbidden {negated['pattern']}")
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{where}: {value!r} not in {schema['enum']}")
    if kind in ("integer", "number"):
        if "minimum" in schema:
            low = schema["minimum"]
            if value < low or (schema.get("exclusiveMinimum") and value == low):
                problems.append(f"{where}: {value} below minimum {low}")
        if "maximum" in schema:
            high = schema["maximum"]
            if value > high or (schema.get("exclusiveMaximum") and value == high):
                problems.append(f"{where}: {value} above maximum {high}")
    if kind == "string":
        if "pattern" in schema and not re.search(schema["pattern"], value):
            problems.append(f"{where}: {value!r} does not match {schema['pattern']}")
        if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", 1 << 30):
            problems.append(f"{where}: length {len(value)} out of bounds")
    if kind == "array":
        if len(value) < schema.get("minItems", 0):
            problems.append(f"{where}: fewer than {schema['minItems']} items")
        if len(value) > schema.get("maxItems", 1 << 30):
            problems.append(f"{where}: more than {schema['maxItems']} items")
        for i, item in enumerate(value):
            problems.extend(validate(item, schema.get("items", {}), f"{path}[{i}]"))
    if kind == "object":
        props: dict[str, Any] = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                problems.append(f"{path + '.' if path else ''}{name}: required")
        if len(value) > schema.get("maxProperties", 1 << 30):
            problems.append(f"{where}: more than {schema['maxProperties']} properties")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            sub = f"{path}.{key}" if path else key
            if key in props:
                problems.extend(validate(item, props[key], sub))
            elif isinstance(extra, dict):
                problems.extend(validate(item, extra, sub))
            elif not schema.get("x-kubernetes-preserve-unknown-fields") and props:
                problems.append(f"{sub}: unknown field (the API server would prune it)")
    return problems
