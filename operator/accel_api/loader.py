"""Reads YAML text into CRD models, with every problem reported by field path.

``load_documents`` parses a (multi-document) YAML stream; ``parse_resource`` validates one
mapping as the kind its ``kind`` field names. Both raise :class:`InvalidResource` and nothing
else for bad input.
"""

from typing import Any, TypeVar

import yaml
from pydantic import ValidationError

from accel_api import errors, registry, vocabulary
from accel_api.base import ApiModel

M = TypeVar("M", bound=ApiModel)


def load_documents(text: str, *, source: str | None = None) -> list[dict[str, Any]]:
    """The non-empty documents in a YAML stream, each a mapping."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise errors.InvalidResource([f"(yaml) {where}{problem}; fix the YAML syntax"], source) from None
    for i, d in enumerate(docs):
        if not isinstance(d, dict):
            raise errors.InvalidResource(
                [f"(document {i + 1}): must be a mapping with apiVersion, kind, metadata and spec"], source
            )
    return docs


def parse_resource(doc: dict[str, Any], *, source: str | None = None) -> ApiModel:
    """Validate ``doc`` as the accel.dev kind it names."""
    kind_name = doc.get("kind")
    kind = registry.BY_KIND.get(str(kind_name))
    if kind is None:
        known = ", ".join(registry.BY_KIND)
        raise errors.InvalidResource([f"kind: {kind_name!r} is not an accel.dev kind; use one of {known}"], source)
    api_version = doc.get("apiVersion")
    if api_version != vocabulary.API_VERSION:
        raise errors.InvalidResource([f"apiVersion: must be {vocabulary.API_VERSION} (got {api_version!r})"], source)
    try:
        return kind.model.model_validate(doc)
    except ValidationError as exc:
        raise errors.InvalidResource(errors.describe(exc, model=kind.model), source) from None


def parse_as(model: type[M], doc: dict[str, Any], *, source: str | None = None) -> M:
    """Validate ``doc`` as ``model`` (e.g. a spec handed to a kopf handler)."""
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        raise errors.InvalidResource(errors.describe(exc, model=model), source) from None
