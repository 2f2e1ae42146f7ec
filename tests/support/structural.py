"""A small stand-in validator for Kubernetes structural (OpenAPI v3.0) schemas, for unit tests.

What it checks: types, required fields, enums, numeric minimum/maximum (with the exclusive
flags), string pattern and minLength/maxLength, array minItems/maxItems, object maxProperties,
nullable, maps (additionalProperties) and unknown fields (which the API server would prune); of the
CEL rules, only those of the form ``!self.matches(r'RE')`` on a string (``patterns.refused_in_crd``).

What it does NOT check, so passing here is not proof that the API server accepts a document:
- ``minProperties``, ``uniqueItems``, ``multipleOf``, ``format``;
- other ``x-kubernetes-validations`` (CEL rules), ``x-kubernetes-list-type``/``-map-keys`` and
  ``x-kubernetes-int-or-string``;
- regex dialect: patterns are run with Python's ``re`` (the server uses Go's RE2, which lacks
  backreferences and lookaround and anchors differently in places);
- ``oneOf``/``anyOf``/``allOf``/``not``, defaults and pruning itself,
  and the estimated CEL cost.

The real check is the cluster test that sends every example to the local kube-apiserver with
strict field validation (tests/cluster/test_smoke.py); this validator keeps unit tests fast.
"""

import re
from typing import Any

_NOT_MATCHES = re.compile(r"!self\.matches\(r'([^']*)'\)")
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
    for rule in schema.get("x-kubernetes-validations", []):
        refused = _NOT_MATCHES.fullmatch(rule["rule"])
        if refused and isinstance(value, str) and re.search(refused.group(1), value):
            problems.append(f"{where}: {rule['message']} (got {value!r})")
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
