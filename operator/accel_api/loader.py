"""Reads YAML text into CRD models, with every problem reported by field path.

``load_documents`` parses a (multi-document) YAML stream; ``parse_resource`` validates one
mapping as the kind its ``kind`` field names. Both raise :class:`InvalidResource` and nothing
else for bad input.

Hostile YAML is refused before it can cost much: :class:`BoundedLoader` limits the text size,
the nesting depth and the number of nodes *after* alias expansion (a 600-byte "billion laughs"
file expands to a billion nodes), and turns the loader's own failures on bad ``!!int``,
``!!float``, ``!!bool`` or ``!!timestamp`` values into YAML errors with a line and column.
"""

import json
import math
import re
from typing import Any, Final, TypeVar

import yaml
from pydantic import ValidationError
from yaml.events import AliasEvent
from yaml.nodes import Node

from accel_api import apiserver, errors, registry, vocabulary
from accel_api.base import ApiModel

M = TypeVar("M", bound=ApiModel)

# Below etcd's 1.5 MiB object limit (the largest valid job spec is ~160 KiB); the pure-Python
# parser needs about a second per MiB.
MAX_TEXT_CHARS: Final = 1024 * 1024
MAX_DEPTH: Final = 64  # our deepest field is 6 levels down
MAX_NODES: Final = 10_000  # per stream, aliases counted as the nodes they stand for; <1 s to read
MAX_INT_DIGITS: Final = 30  # far above any bound (int64 has 19 digits)


class FieldProblem(yaml.YAMLError):
    """A value the loader refuses, with the field path it was found at (``line``: the report)."""

    def __init__(self, path: str, rule: str, got: str, mark: Any) -> None:
        where = f"; line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        self.line = f"{path or '(document)'}: {rule} (got {got}{where})"
        super().__init__(self.line)


# How the API server's YAML reader (go-yaml v2, which kubectl uses too) types a plain scalar. It
# differs from YAML 1.1 (PyYAML): y/n are booleans, 0o17 is an integer, 1:30 (sexagesimal) and
# timestamps are text, 1e5 is a number, and a number too large for a float64 (1e400) or an
# integer for an int64/uint64 that is not a float either (0x + 17 digits) is text. Without this,
# validate would refuse ``value: "1:30"`` written plain, which the API server stores as text,
# and accept ``value: 0o17``, which it refuses as an integer.
_GO_YAML_BOOLS: Final = {
    **dict.fromkeys(["y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"], True),
    **dict.fromkeys(["n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"], False),
}
_GO_YAML_NULLS: Final = frozenset({"", "~", "null", "Null", "NULL"})
_YAML_SPECIAL_FLOATS: Final = frozenset({".nan", ".inf", "+.inf", "-.inf"})
_GO_YAML_SPECIAL_FLOATS: Final = frozenset(
    {f"{sign}{inf}" for sign in ("", "+", "-") for inf in (".inf", ".Inf", ".INF")} | {".nan", ".NaN", ".NAN"}
)
_GO_YAML_FLOAT: Final = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
_GO_DIGITS: Final = {16: "0123456789abcdef", 8: "01234567", 2: "01", 10: "0123456789"}
_INT64: Final = 2**63
_UINT64: Final = 2**64


def _go_int(text: str) -> int | None:
    """``text`` as Go's ``strconv.ParseInt(text, 0, 64)`` reads it, else ``ParseUint``; None when
    neither does (prefixes 0x, 0o, 0b and a leading 0 for octal; an int64, or a uint64 unsigned)."""
    sign, body = 1, text
    if body[:1] in ("+", "-"):
        sign, body = (-1 if body[0] == "-" else 1), body[1:]
    low = body.lower()
    if low[:2] in ("0x", "0o", "0b"):
        base, digits = {"x": 16, "o": 8, "b": 2}[low[1]], low[2:]
    elif len(low) > 1 and low[0] == "0":
        base, digits = 8, low[1:]
    else:
        base, digits = 10, low
    # 70 digits are more than any 64-bit integer needs in any base (and int() stays cheap).
    if not digits or len(digits) > 70 or any(c not in _GO_DIGITS[base] for c in digits):
        return None
    value = sign * int(digits, base)
    if -_INT64 <= value < _INT64 or (text[:1] not in ("+", "-") and 0 <= value < _UINT64):
        return value
    return None


def go_yaml_tag(value: str) -> str:
    """The tag go-yaml v2 resolves a plain scalar to (null, bool, int, float or str)."""
    if value in _GO_YAML_NULLS:
        return "tag:yaml.org,2002:null"
    if value in _GO_YAML_BOOLS:
        return "tag:yaml.org,2002:bool"
    if value in _GO_YAML_SPECIAL_FLOATS:
        return "tag:yaml.org,2002:float"
    if value == "<<":
        return "tag:yaml.org,2002:merge"
    if value[:1] in ("+", "-", ".") or value[:1].isdigit():
        plain = value.replace("_", "") if value[:1] != "." else value
        if value[:1] != "." and _go_int(plain) is not None:
            return "tag:yaml.org,2002:int"
        if _GO_YAML_FLOAT.match(plain) and math.isfinite(float(plain)):
            return "tag:yaml.org,2002:float"
    return "tag:yaml.org,2002:str"


class BoundedLoader(yaml.SafeLoader):
    """A SafeLoader that refuses deep nesting, alias bombs and huge integers, and reports bad
    tagged scalars (``!!int x``) by field path instead of a ValueError/KeyError traceback."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._path: list[str] = []  # the field path of each node being composed, innermost last
        self._expanded = 0  # nodes composed so far, aliases counted at their anchor's size
        self._sizes: dict[int, int] = {}  # id(anchored node) -> its expanded size
        self._paths: dict[int, str] = {}  # id(node) -> its field path, for constructor errors

    def _here(self, parent: Node | None, index: Any) -> str:
        base = self._path[-1] if self._path else ""
        if parent is None or index is None:
            return base
        if isinstance(index, int):
            return f"{base}[{index}]"
        key = str(getattr(index, "value", "?"))
        key = key if len(key) <= 40 else key[:39] + "…"
        return f"{base}.{key}" if base else key

    def _refuse(self, path: str, rule: str, got: str) -> FieldProblem:
        return FieldProblem(path, rule, got, self.peek_event().start_mark)  # type: ignore[no-untyped-call]

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        here = self._here(parent, index)
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, AliasEvent):
            node = self.anchors.get(event.anchor) if event.anchor is not None else None
            self._expanded += self._sizes.get(id(node), 1)
            if self._expanded > MAX_NODES:
                raise self._refuse(here, f"at most {MAX_NODES} values once aliases are expanded", "an alias bomb")
            return super().compose_node(parent, index)
        if len(self._path) >= MAX_DEPTH:
            raise self._refuse(here, f"must be nested at most {MAX_DEPTH} levels deep", f"{len(self._path) + 1} levels")
        before = self._expanded
        self._expanded += 1
        if self._expanded > MAX_NODES:
            raise self._refuse(here, f"at most {MAX_NODES} values once aliases are expanded", "more")
        self._path.append(here)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._path.pop()
        if getattr(event, "anchor", None) is not None:
            self._sizes[id(node)] = self._expanded - before
        self._paths[id(node)] = here
        return node

    def _problem(self, node: Any, rule: str) -> FieldProblem:
        return FieldProblem(self._paths.get(id(node), ""), rule, errors.clip(node.value), node.start_mark)

    def _scalar(self, node: Any, what: str, construct: Any) -> Any:
        try:
            return construct(self, node)
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError, yaml.constructor.ConstructorError):
            raise self._problem(node, f"must be a valid {what}") from None

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        # A plain scalar is typed as the API server's YAML reader (and kubectl's) types it, not
        # as YAML 1.1 does: see ``go_yaml_tag``.
        if kind is yaml.ScalarNode and implicit[0]:
            return go_yaml_tag(value)
        return super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]

    # Tabs, as go-yaml (the API server's reader) takes them: white space between tokens where no
    # key may start (``objective:<TAB>cost``, a trailing tab, in flow style) and inside a plain
    # scalar (``name: a<TAB>b``). PyYAML refused every one, so validate refused files the API
    # server stores. A tab that indents a line, or follows ``-``, is refused by both. The two
    # methods are PyYAML's own with that one change.
    def scan_to_next_token(self) -> None:
        if self.index == 0 and self.peek() == "\ufeff":
            self.forward()
        found = False
        while not found:
            while self.peek() == " " or (self.peek() == "\t" and (self.flow_level or not self.allow_simple_key)):
                self.forward()
            if self.peek() == "#":
                while self.peek() not in "\0\r\n\x85\u2028\u2029":
                    self.forward()
            if self.scan_line_break():  # type: ignore[no-untyped-call]
                if not self.flow_level:
                    self.allow_simple_key = True
            else:
                found = True

    def scan_plain_spaces(self, indent: int, start_mark: Any) -> list[str] | None:
        chunks: list[str] = []
        length = 0
        while self.peek(length) in " \t":
            length += 1
        whitespaces = self.prefix(length)
        self.forward(length)
        if self.peek() not in "\r\n\x85\u2028\u2029":
            return [whitespaces] if whitespaces else chunks
        line_break = self.scan_line_break()  # type: ignore[no-untyped-call]
        self.allow_simple_key = True
        if self.prefix(3) in ("---", "...") and self.peek(3) in "\0 \t\r\n\x85\u2028\u2029":
            return None
        breaks = []
        while self.peek() in " \r\n\x85\u2028\u2029":
            if self.peek() == " ":
                self.forward()
            else:
                breaks.append(self.scan_line_break())  # type: ignore[no-untyped-call]
                if self.prefix(3) in ("---", "...") and self.peek(3) in "\0 \t\r\n\x85\u2028\u2029":
                    return None
        if line_break != "\n":
            chunks.append(line_break)
        elif not breaks:
            chunks.append(" ")
        chunks.extend(breaks)
        return chunks

    def process_directives(self) -> Any:
        # go-yaml reads only YAML 1.1 and refuses a document that declares another version.
        value = super().process_directives()  # type: ignore[no-untyped-call]
        if self.yaml_version not in (None, (1, 1)):
            major, minor = self.yaml_version
            raise FieldProblem(
                "(document)", "must not declare a YAML version other than 1.1", f"%YAML {major}.{minor}", None
            )
        return value

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        # The API server's YAML reader refuses a key given twice (PyYAML would keep the last), and
        # a merge key ("<<: *anchor") hides where a field's value comes from: both are refused.
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise FieldProblem(
                    self._paths.get(id(node), ""),
                    "must not use a YAML merge key (<<); write the fields out",
                    "<<",
                    key_node.start_mark,
                )
            if isinstance(key_node, yaml.ScalarNode):
                # Keys compare as typed values, as go-yaml compares them: "y" and "yes" are both
                # true, "1" and "01" both 1, while 1 and '1' differ.
                key = (key_node.tag, self.construct_object(key_node))
                if key in seen:
                    raise FieldProblem(
                        self._paths.get(id(node), ""),
                        "must not give a key twice",
                        errors.clip(key_node.value),
                        key_node.start_mark,
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_undefined(self, node: Any) -> Any:
        raise FieldProblem(
            self._paths.get(id(node), ""), "must not carry a YAML tag", errors.clip(node.tag), node.start_mark
        )

    def construct_bounded_binary(self, node: Any) -> Any:
        return self._scalar(node, "base64 text", yaml.SafeLoader.construct_yaml_binary)

    def construct_bounded_int(self, node: Any) -> Any:
        digits = sum(c.isdigit() for c in str(node.value))
        if digits > MAX_INT_DIGITS:
            raise self._problem(node, f"must be an integer of at most {MAX_INT_DIGITS} digits")
        value = _go_int(str(node.value).replace("_", ""))
        if value is None:
            raise self._problem(node, "must be a valid integer")
        return value

    def construct_bounded_float(self, node: Any) -> Any:
        text = str(node.value)
        if text.lower() in _YAML_SPECIAL_FLOATS:
            return self._scalar(node, "number", yaml.SafeLoader.construct_yaml_float)
        try:
            return float(text.replace("_", ""))
        except ValueError:
            raise self._problem(node, "must be a valid number") from None

    def construct_bounded_bool(self, node: Any) -> Any:
        value = _GO_YAML_BOOLS.get(str(node.value))
        if value is None:
            raise self._problem(node, "must be a valid boolean (true or false)")
        return value

    def construct_bounded_timestamp(self, node: Any) -> Any:
        return self._scalar(node, "timestamp (quote it to keep it as text)", yaml.SafeLoader.construct_yaml_timestamp)


BoundedLoader.add_constructor(None, BoundedLoader.construct_undefined)
BoundedLoader.add_constructor("tag:yaml.org,2002:binary", BoundedLoader.construct_bounded_binary)
BoundedLoader.add_constructor("tag:yaml.org,2002:int", BoundedLoader.construct_bounded_int)
BoundedLoader.add_constructor("tag:yaml.org,2002:float", BoundedLoader.construct_bounded_float)
BoundedLoader.add_constructor("tag:yaml.org,2002:bool", BoundedLoader.construct_bounded_bool)
BoundedLoader.add_constructor("tag:yaml.org,2002:timestamp", BoundedLoader.construct_bounded_timestamp)


def safe_load_all(text: str) -> list[Any]:
    """Every document of ``text`` through :class:`BoundedLoader`; raises ``yaml.YAMLError``."""
    if len(text) > MAX_TEXT_CHARS:
        raise FieldProblem("(document)", f"at most {MAX_TEXT_CHARS} characters of YAML", f"at least {len(text)}", None)
    loader = BoundedLoader(text)
    out = []
    try:
        while loader.check_data():  # type: ignore[no-untyped-call]
            out.append(loader.get_data())
    except RecursionError:
        raise FieldProblem("(document)", "must be nested less deeply", "too deep", None) from None
    finally:
        loader.dispose()
    return out


def load_documents(text: str, *, source: str | None = None) -> list[dict[str, Any]]:
    """The non-empty documents in a YAML stream, each a mapping."""
    try:
        docs = [d for d in safe_load_all(text) if d is not None]
    except FieldProblem as exc:
        raise errors.InvalidResource([exc.line], source) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise errors.InvalidResource(
            [f"(yaml) {where}{' '.join(str(problem).split())[:200]}; fix the YAML syntax"], source
        ) from None
    for i, d in enumerate(docs):
        if not isinstance(d, dict):
            raise errors.InvalidResource(
                [f"(document {i + 1}): must be a mapping with apiVersion, kind, metadata and spec"], source
            )
    return docs


def _integral(node: Any) -> Any:
    """``node`` with whole floats as integers (``2048.0`` is an integer to the API server too)."""
    if isinstance(node, dict):
        return {k: _integral(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_integral(v) for v in node]
    if isinstance(node, float) and node.is_integer():
        return int(node)
    return node


def parse_resource(doc: dict[str, Any], *, source: str | None = None, strict: bool = False) -> ApiModel:
    """Validate ``doc`` as the accel.dev kind it names. ``strict``: with the API server's types
    (``tokens: true`` is not 1, ``"4"`` is not 4), as ``accelctl validate`` must; the operator
    reads objects the API server already typed."""
    kind_name = doc.get("kind")
    kind = registry.BY_KIND.get(kind_name) if isinstance(kind_name, str) else None
    if kind is None:
        known = ", ".join(registry.BY_KIND)
        raise errors.InvalidResource(
            [f"kind: {errors.clip(kind_name)} is not an accel.dev kind; use one of {known}"], source
        )
    api_version = doc.get("apiVersion")
    if api_version != vocabulary.API_VERSION:
        raise errors.InvalidResource(
            [f"apiVersion: must be {vocabulary.API_VERSION} (got {errors.clip(api_version)})"], source
        )
    if strict:
        return _parse_strict(kind, doc, source)
    try:
        return kind.model.model_validate(doc)
    except ValidationError as exc:
        raise errors.InvalidResource(
            errors.describe(exc, model=kind.model, limit=errors.MAX_PROBLEMS), source
        ) from None


def _parse_strict(kind: registry.Kind, doc: dict[str, Any], source: str | None) -> ApiModel:
    """``doc`` as the API server reads it on create: the nulls it drops or refuses and its metadata
    rules (``apiserver``), then the model in JSON mode (enums and literals read from their text,
    numbers and booleans typed), every problem reported together."""
    doc, problems = apiserver.prune_nulls(doc, kind)
    if isinstance(doc.get("metadata"), dict):
        doc = {**doc, "metadata": apiserver.drop_null_entries(doc["metadata"])}
    problems += apiserver.required_problems(doc, kind)
    problems += apiserver.metadata_problems(doc.get("metadata"))
    parsed: ApiModel | None = None
    try:
        parsed = kind.model.model_validate_json(json.dumps(_integral(doc), default=str), strict=True)
    except ValidationError as exc:
        problems += errors.describe(exc, model=kind.model, limit=errors.MAX_PROBLEMS)
    if problems or parsed is None:
        raise errors.InvalidResource(errors.cap(problems), source)
    return parsed


def parse_as(model: type[M], doc: dict[str, Any], *, source: str | None = None) -> M:
    """Validate ``doc`` as ``model`` (e.g. a spec handed to a kopf handler)."""
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        raise errors.InvalidResource(errors.describe(exc, model=model, limit=errors.MAX_PROBLEMS), source) from None
