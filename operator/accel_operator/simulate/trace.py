"""The simulator's inputs: the trace (JSON lines, one job per line) and the pools file.

A line is ``{"submit": SECONDS, "team": TEAM, "name": NAME?, "spec": {...}}`` (a full
AcceleratorJob spec, validated as the API server would) or the compact form
``{"submit": ..., "team": ..., "model": PRESET, "workload": "training"|"inference",
"tokens": N, "devices": N?, "deadlineHours": H?, "spot": "never"|"prefer"|"require",
"checkpointMinutes": M?}``. A line ``{"disrupt": SECONDS, "job": NAME, "attempt": N?}`` is no job
but a spot disruption: SECONDS after the pods of that job's attempt N (default 0, the first)
started, the node(s) running them are reclaimed (the same instant on a virtual clock and on a real
cluster, whatever the delays before the pods started). Every line is bounded (its length, the
number of lines, every number) and an error names the line and the field; a bad line is never
echoed whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from accel_api import InvalidResource, bounds, load_documents, parse_resource
from accel_api.job import AcceleratorJobSpec
from accel_api.policy import AcceleratorPolicy
from accel_api.pool import AcceleratorPool

MAX_LINES = 200_000  # a trace of more jobs is refused (the largest replay is 100,000)
MAX_LINE_CHARS = 64_000  # one full spec fits with room; a longer line is refused unread
MAX_SUBMIT_SECONDS = 366 * 86_400.0  # a year of trace
MAX_POOLS = 200
MAX_POLICIES = 20  # AcceleratorPolicies in one --policy file (they apply together)

# Model presets of the compact form: the architectures of the examples (examples/01, examples/02)
# and one larger (Llama-3-70B's published shape), so a trace needs no architecture per line.
PRESETS: dict[str, dict[str, Any]] = {
    "tinyllama-1.1b": {
        "layers": 22,
        "hidden": 2048,
        "heads": 32,
        "kvHeads": 4,
        "intermediate": 5632,
        "vocab": 32000,
        "mlp": "swiglu",
    },
    "llama-3-8b": {
        "layers": 32,
        "hidden": 4096,
        "heads": 32,
        "kvHeads": 8,
        "intermediate": 14336,
        "vocab": 128256,
        "mlp": "swiglu",
    },
    "llama-3-70b": {
        "layers": 80,
        "hidden": 8192,
        "heads": 64,
        "kvHeads": 8,
        "intermediate": 28672,
        "vocab": 128256,
        "mlp": "swiglu",
    },
}

Team = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]
Name = Annotated[str, Field(min_length=1, max_length=52, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]


class TraceLine(BaseModel):
    """One line of the trace, before it becomes a spec."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    submit: Annotated[float, Field(ge=0, le=MAX_SUBMIT_SECONDS)]
    team: Team
    name: Name | None = None
    spec: dict[str, Any] | None = None
    model: Literal["tinyllama-1.1b", "llama-3-8b", "llama-3-70b"] | None = None
    workload: Literal["training", "inference"] = "training"
    tokens: Annotated[int, Field(ge=1, le=10**13)] | None = None
    devices: Annotated[int, Field(ge=1, le=bounds.DEVICES)] | None = None
    deadline_hours: Annotated[float, Field(gt=0, le=365 * 24)] | None = Field(default=None, alias="deadlineHours")
    spot: Literal["never", "prefer", "require"] = "prefer"
    checkpoint_minutes: Annotated[float, Field(ge=1, le=1440)] | None = Field(default=None, alias="checkpointMinutes")

    @model_validator(mode="after")
    def _one_form(self) -> TraceLine:
        compact = self.model is not None or self.tokens is not None
        if self.spec is not None and compact:
            raise ValueError(
                "give either spec (a full AcceleratorJob spec) or the compact form (model, tokens), not both"
            )
        if self.spec is None and (self.model is None or self.tokens is None):
            raise ValueError("the compact form needs model (one of " + ", ".join(PRESETS) + ") and tokens")
        return self


class DisruptLine(BaseModel):
    """A disruption of the trace: the spot node(s) of ``job``'s ``attempt`` reclaimed ``disrupt``
    seconds after its pods started (nothing happens if that attempt never runs that long)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    disrupt: Annotated[float, Field(gt=0, le=MAX_SUBMIT_SECONDS)]
    job: Name
    attempt: Annotated[int, Field(ge=0, le=bounds.PREEMPTIONS + bounds.RETRIES_MAX)] = 0


@dataclass(frozen=True)
class Disruption:
    """The node(s) running ``job``'s ``attempt`` reclaimed ``after`` seconds after its pods started."""

    after: float
    job: str
    attempt: int


@dataclass(frozen=True)
class Arrival:
    """One job of the trace: when it arrives (seconds after the trace's start), its team and spec."""

    index: int
    submit: float
    team: str
    name: str
    spec: AcceleratorJobSpec


class TraceError(ValueError):
    """A trace the simulator refuses: each problem names the line and the field."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems[:5]))
        self.problems = problems


def compact_spec(line: TraceLine) -> dict[str, Any]:
    """The AcceleratorJob spec of a compact line (examples/01's shape, the preset's architecture)."""
    assert line.model is not None and line.tokens is not None
    training = line.workload == "training"
    workload: dict[str, Any] = {"mode": line.workload, "precision": "amp-bf16", "seqLen": 2048, "tokens": line.tokens}
    if training:
        workload.update(optimizer="adamw", microBatch=4)
        if line.model != "tinyllama-1.1b":
            workload.update(sharding="zero3", gradientCheckpointing=True, microBatch=2)
    placement: dict[str, Any] = {"acceleratorKinds": ["gpu"]}
    if line.devices is not None:
        placement.update(minDevices=line.devices, maxDevices=line.devices)
    spec: dict[str, Any] = {
        "team": line.team,
        "image": "ghcr.io/example/trainer:1.4",
        "command": ["python", "-m", "trainer"],
        "model": {"name": line.model, "architecture": PRESETS[line.model]},
        "workload": workload,
        "placement": placement,
        "objective": "cost",
        "spot": {"policy": line.spot, "maxPreemptions": 20},
    }
    if line.deadline_hours is not None:
        spec["deadline"] = f"{max(1, round(line.deadline_hours * 60))}m"
    if line.checkpoint_minutes is not None:
        spec["checkpoint"] = {"uri": f"s3://ckpt/{line.team}/sim", "intervalMinutes": line.checkpoint_minutes}
    return spec


def _lines_to_read(
    lines: list[str], first: int, max_chars: int, source: str, problems: list[str]
) -> Iterator[tuple[int, str]]:
    """Each line to read with its number (the first is ``first``): blank and ``#`` lines skipped, a
    line over ``max_chars`` reported unread; it stops once the caller has found 20 problems."""
    for n, raw in enumerate(lines, start=first):
        if len(problems) >= 20:
            problems.append(f"{source}: more problems after line {n - 1} not shown")
            return
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        if len(raw) > max_chars:
            problems.append(f"{source}:{n}: the line is {len(raw)} characters; at most {max_chars}")
            continue
        yield n, raw


def _where(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc) or "(line)"


def read_trace(text: str, *, source: str = "trace") -> list[Arrival]:
    """Every job of a JSON-lines trace, sorted by submit time (ties in file order); raises
    :class:`TraceError` naming each bad line and field (at most 20, then a count)."""
    return read_trace_events(text, source=source)[0]


def read_trace_events(text: str, *, source: str = "trace") -> tuple[list[Arrival], list[Disruption]]:
    """The jobs of a trace (as :func:`read_trace`) and its disruption lines, each naming a job of
    the trace (at most one per job and attempt)."""
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        raise TraceError([f"{source}: {len(lines)} lines; at most {MAX_LINES} jobs per trace"])
    out: list[Arrival] = []
    disruptions: list[tuple[int, Disruption]] = []  # with their line numbers
    problems: list[str] = []
    for n, raw in _lines_to_read(lines, 1, MAX_LINE_CHARS, source, problems):
        try:
            doc = json.loads(raw)
        except json.JSONDecodeError as exc:
            problems.append(f"{source}:{n}: not JSON ({exc.msg} at column {exc.colno})")
            continue
        if isinstance(doc, dict) and "disrupt" in doc:
            try:
                d = DisruptLine.model_validate(doc)
            except ValidationError as exc:
                problems.extend(f"{source}:{n}: {_where(e['loc'])}: {e['msg'][:200]}" for e in exc.errors()[:5])
                continue
            disruptions.append((n, Disruption(d.disrupt, d.job, d.attempt)))
            continue
        try:
            line = TraceLine.model_validate(doc)
        except ValidationError as exc:
            problems.extend(f"{source}:{n}: {_where(e['loc'])}: {e['msg'][:200]}" for e in exc.errors()[:5])
            continue
        body = line.spec if line.spec is not None else compact_spec(line)
        name = line.name or f"job-{len(out) + 1:06d}"
        body = {**body, "team": line.team}
        if line.spec is None and line.checkpoint_minutes is not None:
            body["checkpoint"] = {**body["checkpoint"], "uri": f"s3://ckpt/{line.team}/{name}"}  # one per job
        try:
            job = parse_resource(
                {
                    "apiVersion": "accel.dev/v1alpha1",
                    "kind": "AcceleratorJob",
                    "metadata": {"name": name, "namespace": line.team},
                    "spec": body,
                },
                source=None,
                strict=True,
            )
        except InvalidResource as exc:
            problems.extend(f"{source}:{n}: {p[:240]}" for p in exc.problems[:5])
            continue
        spec = getattr(job, "spec", None)
        assert isinstance(spec, AcceleratorJobSpec)
        out.append(Arrival(len(out), line.submit, line.team, name, spec))
    if problems:
        raise TraceError(problems)
    if not out:
        raise TraceError([f"{source}: the trace holds no job"])
    names = [a.name for a in out]
    if len(set(names)) != len(names):
        raise TraceError([f"{source}: job names must be unique (name is optional: leave it out)"])
    known, seen = set(names), set()
    for n, cut in disruptions:
        if cut.job not in known:
            problems.append(f"{source}:{n}: job: no job of the trace is named {cut.job!r}")
        elif (cut.job, cut.attempt) in seen:
            problems.append(f"{source}:{n}: job: a second disruption of {cut.job!r} attempt {cut.attempt}")
        seen.add((cut.job, cut.attempt))
    if problems:
        raise TraceError(problems[:20])
    return sorted(out, key=lambda a: (a.submit, a.index)), [cut for _, cut in disruptions]


R = TypeVar("R", AcceleratorPool, AcceleratorPolicy)


def _read_kind(text: str, source: str, kind: type[R], most: int) -> list[R]:
    """The documents of one YAML or JSON file (multi-document), each validated strictly as the API
    server would and each of ``kind``: at least one, at most ``most``, each named once. Every
    error names the file, the document and the field."""
    what = kind.__name__
    found: list[R] = []
    problems: list[str] = []
    for i, doc in enumerate(load_documents(text, source=source)):
        try:
            res = parse_resource(doc, source=None, strict=True)
        except InvalidResource as exc:
            problems.extend(f"{source}: document {i + 1}: {p}" for p in exc.problems)
            continue
        if not isinstance(res, kind):
            problems.append(f"{source}: document {i + 1}: kind must be {what}")
            continue
        found.append(res)
    if problems:
        raise TraceError(problems)
    if not found:
        raise TraceError([f"{source}: no {what} in the file"])
    if len(found) > most:
        raise TraceError([f"{source}: {len(found)} of {what}; at most {most}"])
    names = [r.metadata.name for r in found]
    if any(not n for n in names) or len(set(names)) != len(names):
        raise TraceError([f"{source}: metadata.name: every {what} needs a name, each name once"])
    return found


def read_pools(text: str, *, source: str = "pools") -> list[AcceleratorPool]:
    """The AcceleratorPools of a YAML or JSON file (multi-document), validated strictly."""
    return _read_kind(text, source, AcceleratorPool, MAX_POOLS)


def read_policies(text: str, *, source: str = "policy") -> list[AcceleratorPolicy]:
    """The AcceleratorPolicies of one ``--policy`` file (YAML or JSON, multi-document), validated
    as the API server would; they apply together, as one strategy."""
    return _read_kind(text, source, AcceleratorPolicy, MAX_POLICIES)


MAX_SERIES_LINES = 200_000  # points of a price or interruption series
SERIES_LINE_CHARS = 400
_POINT = {"price": (0.0, 1000.0), "nodes": (1, bounds.NODES)}


@dataclass(frozen=True)
class Point:
    """One point of a recorded series: at ``at`` (seconds after the trace's start), ``pool``'s
    spot price becomes ``value`` USD per device-hour, or ``value`` of its nodes are interrupted."""

    at: float
    pool: str
    value: float


def read_series(text: str, column: str, pools: set[str], *, source: str = "series") -> list[Point]:
    """A recorded series as CSV with the header ``time,pool,price`` (spot prices) or
    ``time,pool,nodes`` (interruptions), ``time`` in seconds after the trace's start; sorted by
    time. Each error names the line and the field (at most 20); a bad line is never echoed."""
    lines = text.splitlines()
    if len(lines) > MAX_SERIES_LINES + 1:
        raise TraceError([f"{source}: {len(lines)} lines; at most {MAX_SERIES_LINES} points"])
    header = [h.strip() for h in lines[0].split(",")] if lines else []
    if header != ["time", "pool", column]:
        raise TraceError([f"{source}:1: the header must be time,pool,{column}"])
    low, high = _POINT[column]
    out: list[Point] = []
    problems: list[str] = []
    for n, raw in _lines_to_read(lines[1:], 2, SERIES_LINE_CHARS, source, problems):
        cells = [c.strip() for c in raw.split(",")]
        if len(cells) != 3:
            problems.append(f"{source}:{n}: {len(cells)} fields; want 3 (time,pool,{column})")
            continue
        at, pool, value = cells
        try:
            t = float(at)
        except ValueError:
            problems.append(f"{source}:{n}: time: not a number")
            continue
        if not 0 <= t <= MAX_SUBMIT_SECONDS:
            problems.append(f"{source}:{n}: time: must be 0 to {MAX_SUBMIT_SECONDS:g} seconds")
            continue
        if pool not in pools:
            problems.append(f"{source}:{n}: pool: not a pool of the pools file ({pool[:63]!r})")
            continue
        try:
            v = float(value) if column == "price" else int(value)
        except ValueError:
            problems.append(f"{source}:{n}: {column}: not a {'number' if column == 'price' else 'whole number'}")
            continue
        if not low <= v <= high:
            problems.append(f"{source}:{n}: {column}: must be {low:g} to {high:g}")
            continue
        out.append(Point(t, pool, float(v)))
    if problems:
        raise TraceError(problems)
    return sorted(out, key=lambda p: p.at)


def read_lead_times(items: list[str], pools: set[str]) -> dict[str, float]:
    """``POOL=SECONDS`` items (``--warning``): each pool's early-warning lead time."""
    out: dict[str, float] = {}
    for item in items:
        pool, sep, value = item.partition("=")
        if not sep or pool not in pools:
            raise TraceError([f"--warning {item[:80]!r}: want POOL=SECONDS with a pool of the pools file"])
        try:
            seconds = float(value)
        except ValueError:
            raise TraceError([f"--warning {pool}: SECONDS must be a number of seconds"]) from None
        if not 0 <= seconds <= 3600:
            raise TraceError([f"--warning {pool}: SECONDS must be 0 to 3600"])
        out[pool] = seconds
    return out
