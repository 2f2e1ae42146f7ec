"""Turns pydantic's validation errors into lines a person can act on.

Each line is ``<field path>: <what is wrong>[; <how to fix>]``, e.g.
``spec.workload.microBatch: must be >= 1 (got 0)``. The path uses the YAML (camelCase) names.

Tenant values are never echoed whole: :func:`clip` cuts every echoed value (80 characters, then
an ellipsis and the original length), and :func:`cap` keeps the first 20 problems of a document.
"""

import difflib
import re
import reprlib
from collections.abc import Iterable, Sequence
from typing import Any, Final

from pydantic import BaseModel, ValidationError

from accel_api import patterns

CLIP: Final = 80  # characters of a tenant value shown in an error or a log line
MAX_PROBLEMS: Final = 20  # problems shown per document; the rest are counted
PATH_PART: Final = 40  # characters of one (tenant-chosen) key in a field path

_REPR = reprlib.Repr()
_REPR.maxlevel = 2
_REPR.maxstring = CLIP + 8
_REPR.maxother = CLIP + 8
_REPR.maxlong = CLIP + 8
for _attr in ("maxlist", "maxtuple", "maxdict", "maxset", "maxfrozenset"):
    setattr(_REPR, _attr, 8)


def _size(value: Any) -> int | None:
    """The length worth reporting of ``value`` (characters of text, digits of a number)."""
    if isinstance(value, str | bytes | list | tuple | dict | set | frozenset):
        return len(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return max(1, int(value.bit_length() * 0.30103) + 1) if value else 1
    return None


def clip(value: Any, limit: int = CLIP) -> str:
    """``repr(value)`` for an error or a log line, at most about ``limit`` characters.

    Longer values end in ``…`` followed by their original size, e.g. ``'aaaa…' (200000 chars)``.
    Cheap on any input: huge containers, deep nesting and integers too long for ``repr``.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * limit:
        return f"<integer of about {_size(value)} digits>"
    if isinstance(value, str | bytes):
        text = repr(value[: limit + 1])
    else:
        try:
            text = _REPR.repr(value)
        except (ValueError, RecursionError):
            text = f"<{type(value).__name__}>"
    if len(text) <= limit and not (isinstance(value, str | bytes) and len(value) > limit):
        return text
    unit = "chars" if isinstance(value, str | bytes) else "digits" if isinstance(value, int) else "items"
    size = _size(value)
    return text[: limit - 1] + "…" + (f" ({size} {unit})" if size is not None else "")


_MORE = re.compile(r"(?:.*: )?\.\.\. and (\d+) more")


def cap(problems: Sequence[str], limit: int = MAX_PROBLEMS) -> list[str]:
    """The first ``limit`` problems, then one line counting the rest (including the ones an
    earlier ``cap`` already counted, so capping twice keeps the right total)."""
    kept: list[str] = []
    more = 0
    for line in problems:
        counted = _MORE.fullmatch(line)
        if counted:
            more += int(counted.group(1))
        elif len(kept) < limit:
            kept.append(line)
        else:
            more += 1
    return [*kept, f"... and {more} more"] if more else kept


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
            name = part if len(part) <= PATH_PART else part[: PATH_PART - 1] + "…"
            out = f"{out}.{name}" if out else name
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


def describe(
    err: ValidationError, *, model: type[BaseModel] | None = None, prefix: str = "", limit: int | None = None
) -> list[str]:
    """One line per problem in ``err``, with field path, rule and, where known, the fix; with
    ``limit``, the first ``limit`` problems and a line counting the rest (cheap on 10,000 errors)."""
    found = err.errors(include_url=False)
    if limit is not None and len(found) > limit:
        return [*describe_each(found[:limit], model, prefix), f"... and {len(found) - limit} more"]
    return describe_each(found, model, prefix)


def describe_each(found: Sequence[Any], model: type[BaseModel] | None, prefix: str) -> list[str]:
    """The lines of :func:`describe` for pydantic's error dicts ``found``."""
    lines: list[str] = []
    for e in found:
        loc = tuple(e["loc"])
        path = _path(loc, prefix)
        kind = e["type"]
        ctx = e.get("ctx") or {}
        got = clip(e.get("input"))
        if kind == "extra_forbidden":
            name = str(loc[-1])[:PATH_PART] if loc else "?"
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
            lines.append(f"{path}: must be {op} {bound} (got {got})")
        elif kind == "enum":
            lines.append(f"{path}: must be one of {ctx.get('expected', '?')} (got {got})")
        elif kind == "literal_error":
            lines.append(f"{path}: must be {ctx.get('expected', '?')} (got {got})")
        elif kind == "string_pattern_mismatch":
            rule = patterns.EXPLAINED.get(str(ctx.get("pattern")), f"must match {ctx.get('pattern')}")
            lines.append(f"{path}: {rule} (got {got})")
        elif kind in ("int_type", "int_parsing", "int_from_float"):
            lines.append(f"{path}: must be a whole number (got {got})")
        elif kind in ("float_type", "float_parsing"):
            lines.append(f"{path}: must be a number (got {got})")
        elif kind in ("bool_type", "bool_parsing"):
            lines.append(f"{path}: must be true or false (got {got})")
        elif kind == "string_type":
            lines.append(f"{path}: must be a string (got {got})")
        elif kind in ("list_type",):
            lines.append(f"{path}: must be a list (got {type(e.get('input')).__name__})")
        elif kind in ("model_type", "dict_type", "model_attributes_type"):
            lines.append(f"{path}: must be a mapping of fields (got {type(e.get('input')).__name__})")
        elif kind in ("string_too_long", "too_long"):
            limit = ctx.get("max_length", "?")
            unit = "characters" if kind == "string_too_long" else "items"
            lines.append(f"{path}: must have at most {limit} {unit} (got {got})")
        elif kind in ("finite_number",):
            lines.append(f"{path}: must be a finite number (got {got})")
        elif kind == "value_error":
            msg = str(ctx.get("error", e["msg"]))
            lines.append(f"{path}: {msg}")
        else:
            lines.append(f"{path}: {e['msg'][:200].lower()} (got {got})")
    return lines
