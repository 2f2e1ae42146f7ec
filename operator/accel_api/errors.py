"""Turns pydantic's validation errors into lines a person can act on.

Each line is ``<field path>: <what is wrong>[; <how to fix>]``, e.g.
``spec.workload.microBatch: must be >= 1 (got 0)``. The path uses the YAML (camelCase) names.
"""

import difflib
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from accel_api import patterns


class InvalidResource(ValueError):
    """A document that does not describe a valid resource; ``problems`` holds one line each."""

    def __init__(self, problems: Sequence[str], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(where + "; ".join(self.problems))


def _path(loc: Iterable[int | str], prefix: str) -> str:
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.startswith("function-after") or part.startswith("function-before"):
            continue
        else:
            out = f"{out}.{part}" if out else part
    return out or "(document)"


def _field_names(model: type[BaseModel] | None, loc: Sequence[int | str]) -> list[str]:
    """The camelCase field names allowed at the parent of ``loc``, to suggest a fix."""
    current: Any = model
    for part in loc[:-1]:
        if current is None or isinstance(part, int):
            continue
        fields = getattr(current, "model_fields", None)
        if not fields:
            return []
        match = next((f for n, f in fields.items() if part in (f.alias or n, n)), None)
        if match is None:
            return []
        current = _model_in(match.annotation)
    fields = getattr(current, "model_fields", None) or {}
    return [f.alias or n for n, f in fields.items()]


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def describe(err: ValidationError, *, model: type[BaseModel] | None = None, prefix: str = "") -> list[str]:
    """One line per problem in ``err``, with field path, rule and, where known, the fix."""
    lines: list[str] = []
    for e in err.errors(include_url=False):
        loc = tuple(e["loc"])
        path = _path(loc, prefix)
        kind = e["type"]
        ctx = e.get("ctx") or {}
        got = e.get("input")
        if kind == "extra_forbidden":
            name = str(loc[-1]) if loc else "?"
            allowed = _field_names(model, loc)
            close = difflib.get_close_matches(name, allowed, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            known = f" Known fields: {', '.join(sorted(allowed))}." if allowed else ""
            lines.append(f"{path}: unknown field{hint}{known}")
        elif kind == "missing":
            lines.append(f"{path}: required field is missing")
        elif kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
            op = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}[kind]
            bound = next(iter(ctx.values()), "?")
            lines.append(f"{path}: must be {op} {bound} (got {got!r})")
        elif kind == "enum":
            lines.append(f"{path}: must be one of {ctx.get('expected', '?')} (got {got!r})")
        elif kind == "literal_error":
            lines.append(f"{path}: must be {ctx.get('expected', '?')} (got {got!r})")
        elif kind == "string_pattern_mismatch":
            rule = patterns.EXPLAINED.get(str(ctx.get("pattern")), f"must match {ctx.get('pattern')}")
            lines.append(f"{path}: {rule} (got {got!r})")
        elif kind in ("int_type", "int_parsing", "int_from_float"):
            lines.append(f"{path}: must be a whole number (got {got!r})")
        elif kind in ("float_type", "float_parsing"):
            lines.append(f"{path}: must be a number (got {got!r})")
        elif kind in ("bool_type", "bool_parsing"):
            lines.append(f"{path}: must be true or false (got {got!r})")
        elif kind == "string_type":
            lines.append(f"{path}: must be a string (got {got!r})")
        elif kind in ("list_type",):
            lines.append(f"{path}: must be a list (got {type(got).__name__})")
        elif kind in ("model_type", "dict_type", "model_attributes_type"):
            lines.append(f"{path}: must be a mapping of fields (got {type(got).__name__})")
        elif kind == "value_error":
            msg = str(ctx.get("error", e["msg"]))
            lines.append(f"{path}: {msg}")
        else:
            lines.append(f"{path}: {e['msg'].lower()}")
    return lines
