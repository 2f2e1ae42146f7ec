"""What the API server does to an accel.dev object on create besides the CRD schema: it drops a
``null`` the schema does not allow (a field left out), refuses a ``null`` in a nullable field
with an ``enum`` and an object without a field the CRD requires but the model defaults (a
policy's ``spec``), and checks the object's metadata (name, labels, annotations, finalizers and no
unknown metadata field). ``accelctl validate`` runs these before the models, so that it refuses
and accepts what the API server does (the differential test holds the two to it).

The metadata rules are Kubernetes' own (``ValidateObjectMeta``): a name is an RFC 1123
subdomain, label and annotation keys are qualified names, label values at most 63 characters of
``[A-Za-z0-9._-]``, annotations at most 256 KiB in all.
"""

import functools
import re
from typing import Any, Final

from accel_api import crdgen, errors, patterns, registry

ANNOTATIONS_BYTES: Final = 256 * 1024  # Kubernetes: TotalAnnotationSizeLimitB
QUALIFIED_NAME_LENGTH: Final = 63
# Every field of ObjectMeta: any other is an unknown field, refused by a strict create.
METADATA_FIELDS: Final = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)
_NAME_PART: Final = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


@functools.cache
def _schema(kind_name: str) -> dict[str, Any]:
    return crdgen.openapi_schema(registry.BY_KIND[kind_name])


def prune_nulls(doc: dict[str, Any], kind: registry.Kind) -> tuple[dict[str, Any], list[str]]:
    """``doc`` without the nulls the API server drops (a field whose schema is not nullable: it
    reads as left out), and the nulls it refuses (a nullable field with an enum)."""
    problems: list[str] = []
    return _prune(doc, _schema(kind.kind), "", problems), problems


def required_problems(doc: dict[str, Any], kind: registry.Kind) -> list[str]:
    """The object's fields the CRD requires that the model would default (an AcceleratorPolicy's
    ``spec``: the API server refuses a policy without one)."""
    defaulted = {f.alias or name for name, f in kind.model.model_fields.items() if not f.is_required()}
    return [
        f"{name}: is required (write {name}: {{}} for an empty one)"
        for name in _schema(kind.kind).get("required", [])
        if name not in doc and name in defaulted
    ]


def _child_path(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _prune(value: Any, schema: dict[str, Any], path: str, problems: list[str]) -> Any:
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_prune(v, schema["items"], f"{path}[{i}]", problems) for i, v in enumerate(value)]
    if not isinstance(value, dict):
        return value
    props: dict[str, Any] = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    out = {}
    for key, item in value.items():
        child = props.get(key) if props else extra if isinstance(extra, dict) else None
        if child is None:  # an unknown field: the models refuse it
            out[key] = item
            continue
        here = _child_path(path, key)
        if item is None:
            if not child.get("nullable"):
                continue  # dropped, as the API server drops it
            if "enum" in child:
                choices = ", ".join(str(c) for c in child["enum"])
                problems.append(f"{here}: must be one of {choices}, or left out (got null)")
            out[key] = None
            continue
        out[key] = _prune(item, child, here, problems)
    return out


def _qualified_name(key: str) -> str | None:
    """Why ``key`` is not a Kubernetes qualified name (``[prefix/]name``), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return "its prefix before '/' must not be empty"
    if slash and "/" in prefix:
        return "must hold at most one '/'"
    if slash and (len(prefix) > 253 or not re.fullmatch(patterns.DNS_SUBDOMAIN, prefix)):
        return "its prefix must be a lowercase DNS name of at most 253 characters, e.g. example.com"
    if not name or len(name) > QUALIFIED_NAME_LENGTH or not _NAME_PART.fullmatch(name):
        return (
            f"its name must be 1 to {QUALIFIED_NAME_LENGTH} letters, digits, '-', '_' or '.', starting and "
            "ending with a letter or digit"
        )
    return None


def _keys(where: str, mapping: Any, problems: list[str], lower: bool = False) -> None:
    if not isinstance(mapping, dict):
        return
    for key in mapping:
        if not isinstance(key, str):
            continue  # the models refuse a key that is not text
        why = _qualified_name(key.lower() if lower else key)
        if why is not None:
            problems.append(f"{where}: key {errors.clip(key)} {why}")


def metadata_problems(meta: Any) -> list[str]:
    """What the API server refuses in ``metadata`` on create, one line each."""
    if not isinstance(meta, dict):
        return ["metadata: must be a mapping with at least a name"]
    problems = [f"metadata.{errors.clip(k)}: is not a metadata field" for k in meta if k not in METADATA_FIELDS]
    name, generate = meta.get("name"), meta.get("generateName")
    if not name and not generate:
        problems.append("metadata.name: is required (or metadata.generateName)")
    elif isinstance(name, str) and name and (len(name) > 253 or not re.fullmatch(patterns.DNS_SUBDOMAIN, name)):
        problems.append(f"metadata.name: {patterns.EXPLAINED[patterns.DNS_SUBDOMAIN]}, at most 253 characters")
    labels = meta.get("labels")
    _keys("metadata.labels", labels, problems)
    if isinstance(labels, dict):
        for key, value in labels.items():
            if isinstance(value, str) and (len(value) > 63 or not re.fullmatch(patterns.LABEL_VALUE, value)):
                problems.append(f"metadata.labels.{errors.clip(key)}: {patterns.EXPLAINED[patterns.LABEL_VALUE]}")
    annotations = meta.get("annotations")
    _keys("metadata.annotations", annotations, problems, lower=True)
    if isinstance(annotations, dict):
        size = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items() if v is not None)
        if size > ANNOTATIONS_BYTES:
            problems.append(f"metadata.annotations: at most {ANNOTATIONS_BYTES} bytes in all (got {size})")
    finalizers = meta.get("finalizers")
    if isinstance(finalizers, list):
        _keys("metadata.finalizers", {f: None for f in finalizers if isinstance(f, str)}, problems)
    return problems


def drop_null_entries(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` with null label and annotation values left out (the API server drops them)."""
    out = dict(meta)
    for field in ("labels", "annotations"):
        if isinstance(out.get(field), dict):
            out[field] = {k: v for k, v in out[field].items() if v is not None}
    return out
