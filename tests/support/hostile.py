"""Hostile input for accelctl: a fixed corpus, mutations of the examples, and one checker.

The unit fuzz tests (``tests/unit/cli/test_hostile_input.py``, Hypothesis drawing the mutation)
and ``bench/fuzz_cli.py`` (10,000+ documents drawn with ``random``) share everything here, so
both exercise the same code paths as ``accelctl validate``, ``accelctl plan`` and
``accelctl plan -o json``, and judge the result by the same rules:

- no traceback: the CLI ends with exit status 0 or 2 and nothing else escapes;
- output at most ``OUTPUT_FACTOR`` × the input size + ``OUTPUT_SLACK`` bytes (+ ``PLAN_SLACK``
  for a plan that succeeds);
- no NaN or infinity in JSON output;
- every ``error:`` line names a field path (or ``(yaml)``/``(document)`` for the whole file).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import random
import re
import traceback
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES: dict[str, str] = {p.name: p.read_text() for p in sorted((ROOT / "examples").glob("*.yaml"))}
JOB_EXAMPLES = [n for n, t in EXAMPLES.items() if "kind: AcceleratorJob" in t]

OUTPUT_FACTOR = 20
OUTPUT_SLACK = 4096
# A plan that succeeds lists every candidate (pool × device count): about 150 KB of JSON for the
# default pools whatever the input, so a successful plan gets this much more room.
PLAN_SLACK = 256 * 1024

_JOB = EXAMPLES["02-multinode-spot-training.yaml"]


def _job_with(spec_line: str) -> str:
    """The multinode example with ``spec_line`` (two-space indented YAML) added to its spec."""
    return _JOB + spec_line


def _billion_laughs(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return (
        "apiVersion: accel.dev/v1alpha1\nkind: AcceleratorJob\n"
        + "\n".join(f"x{line}" for line in lines)
        + f"\nspec: {{command: *a{levels - 1}, args: *a{levels - 1}, team: *a{levels - 1}}}\n"
    )


def _deep(n: int, opener: str, closer: str) -> str:
    return "apiVersion: accel.dev/v1alpha1\nkind: AcceleratorJob\nspec: " + opener * n + closer * n + "\n"


def _deep_block(n: int) -> str:
    return "".join("  " * i + f"k{i}:\n" for i in range(n)) + "  " * n + "v\n"


# Each: (name, YAML text). Every one must be refused cleanly (exit 2) or accepted (exit 0).
CORPUS: list[tuple[str, str]] = [
    ("deep-flow-seq-500", _deep(500, "[", "]")),
    ("deep-flow-map-500", _deep(500, "{a: ", "}")),
    ("deep-block-map-500", _deep_block(500)),
    ("deep-seq-5000", _deep(5000, "[", "]")),
    ("billion-laughs", _billion_laughs()),
    ("alias-to-spec", "base: &s {team: research}\napiVersion: accel.dev/v1alpha1\nkind: AcceleratorJob\nspec: *s\n"),
    ("huge-int-5000", _JOB.replace("tokens: 20000000000", "tokens: " + "9" * 5000)),
    ("huge-int-4299", _JOB.replace("tokens: 20000000000", "tokens: " + "9" * 4299)),
    ("huge-int-float-field", _JOB.replace("maxCost: 250000", "maxCost: " + "9" * 400)),
    ("huge-negative-int", _JOB.replace("maxCost: 250000", "maxCost: -" + "9" * 5000)),
    ("bad-int-tag", _JOB.replace("tokens: 20000000000", "tokens: !!int 0xZZ")),
    ("bad-int-tag-sexagesimal", _JOB.replace("tokens: 20000000000", "tokens: !!int 1:2:x")),
    ("bad-float-tag", _JOB.replace("maxCost: 250000", "maxCost: !!float abc")),
    ("bad-bool-tag", _JOB.replace("gradientCheckpointing: true", "gradientCheckpointing: !!bool maybe")),
    ("bad-timestamp-tag", _JOB.replace("deadline: 7d", "deadline: !!timestamp 2024-13-45")),
    ("bad-implicit-timestamp", _JOB.replace("name: llama-8b-pretrain", "name: 2024-02-30")),
    ("binary-tag", _JOB.replace("image: ghcr.io/example/trainer:1.4", "image: !!binary '@@@'")),
    ("python-tag", _JOB.replace("image: ghcr.io/example/trainer:1.4", "image: !!python/object:os.system x")),
    ("set-tag", _JOB.replace("command: [", "command: !!set {a, b}\n  x: [")),
    ("omap-tag-bad", _JOB.replace("deadline: 7d", "deadline: !!omap [1, 2]")),
    ("unhashable-key", _JOB + "  ? [a, b]\n  : c\n"),
    ("nan-maxcost", _JOB.replace("maxCost: 250000", "maxCost: .nan")),
    ("inf-maxcost", _JOB.replace("maxCost: 250000", "maxCost: .inf")),
    ("neg-inf-interval", _JOB.replace("intervalMinutes: 20", "intervalMinutes: -.inf")),
    ("1e308-maxcost", _JOB.replace("maxCost: 250000", "maxCost: 1.0e+308")),
    ("1e400-maxcost", _JOB.replace("maxCost: 250000", "maxCost: 1.0e+400")),
    ("deadline-0s", _JOB.replace("deadline: 7d", "deadline: 0s")),
    ("deadline-200kb", _JOB.replace("deadline: 7d", "deadline: " + "1" * 200_000 + "d")),
    ("deadline-huge-number", _JOB.replace("deadline: 7d", "deadline: " + "9" * 300 + "d")),
    ("text-over-1mib", _JOB + ("# " + "c" * 98 + "\n") * 12_000),
    ("nodes-9k", _job_with("  args:\n" + "".join(f"    - a{i}\n" for i in range(9_000)))),
    ("image-1mb", _JOB.replace("image: ghcr.io/example/trainer:1.4", "image: " + "x" * 1_000_000)),
    ("interval-0", _JOB.replace("intervalMinutes: 20", "intervalMinutes: 0")),
    ("interval-1e9", _JOB.replace("intervalMinutes: 20", "intervalMinutes: 1000000000")),
    ("checkpoint-traversal", _JOB.replace("s3://ml-checkpoints/research/llama-8b", "pvc://claim/../../etc")),
    ("checkpoint-encoded", _JOB.replace("s3://ml-checkpoints/research/llama-8b", "s3://b/%2e%2e/x")),
    # (the example has an env already: a second "env:" key is itself refused, as by the API server)
    ("env-ld-preload", _JOB.replace("{name: WANDB_PROJECT, value: llama-8b}", "{name: LD_PRELOAD, value: /tmp/x.so}")),
    ("env-accel", _JOB.replace("WANDB_PROJECT", "ACCEL_CHECKPOINT_URI")),
    ("env-nvidia", _JOB.replace("WANDB_PROJECT", "NVIDIA_VISIBLE_DEVICES")),
    ("tpu-topology-0x4", EXAMPLES["12-pool-tpu-v5e.yaml"].replace("tpuTopology: 2x4", 'tpuTopology: "0x4"')),
    (
        "pool-price-1e308",
        EXAMPLES["10-pool-h100-spot.yaml"].replace("spotPerDeviceHour: 2.5", "spotPerDeviceHour: 1e308"),
    ),
    ("pool-price-inf", EXAMPLES["10-pool-h100-spot.yaml"].replace("spotPerDeviceHour: 2.5", "spotPerDeviceHour: .inf")),
    ("layers-huge", _JOB.replace("layers: 32", "layers: 1000000000")),
    ("params-1e300", _JOB.replace("architecture: {", "parameters: 1" + "0" * 30 + "\n    x: {")),
    ("unicode-everywhere", _JOB.replace("team: research", "team: r\u00e9search\u202e\U0001f600")),
    ("unicode-keys", _JOB + "  \u0441pec\U0001f600: 1\n"),
    ("nul-escape", _JOB.replace("image: ghcr.io/example/trainer:1.4", 'image: "a\\0b\\x07"')),
    ("long-unknown-key", _JOB + "  " + "k" * 100_000 + ": 1\n"),
    ("many-unknown-keys", _JOB + "".join(f"  u{i}: {i}\n" for i in range(2000))),
    ("many-env", _job_with("  env:\n" + "".join(f"    - {{name: E{i}, value: v}}\n" for i in range(2000)))),
    ("many-docs", "---\n".join([EXAMPLES["11-pool-l4-on-demand.yaml"]] * 300)),
    ("not-a-mapping", "- 1\n- 2\n"),
    ("scalar-doc", "just text\n"),
    ("empty", ""),
    ("only-comments", "# nothing\n"),
    ("kind-is-a-list", "apiVersion: accel.dev/v1alpha1\nkind: [a, b]\nspec: {}\n"),
    ("kind-huge", "apiVersion: accel.dev/v1alpha1\nkind: " + "K" * 100_000 + "\nspec: {}\n"),
    ("apiversion-huge", "apiVersion: " + "v" * 100_000 + "\nkind: AcceleratorJob\nspec: {}\n"),
    ("metadata-name-huge", _JOB.replace("name: llama-8b-pretrain", "name: " + "n" * 100_000)),
    ("yaml-syntax", "spec: [a\n"),
    ("tab-indent", "spec:\n\tteam: x\n"),
    ("duplicate-keys", _JOB + "  team: other\n"),
    ("merge-key", "b: &b {team: research}\napiVersion: accel.dev/v1alpha1\nkind: AcceleratorJob\nspec: {<<: *b}\n"),
    ("bool-as-int", _JOB.replace("tokens: 20000000000", "tokens: true")),
    ("float-as-int", _JOB.replace("tokens: 20000000000", "tokens: 1.5e10")),
    ("neg-zero", _JOB.replace("maxCost: 250000", "maxCost: -0.0")),
]

# Values a mutation puts somewhere in an example.
HOSTILE_VALUES: list[Any] = [
    math.nan,
    math.inf,
    -math.inf,
    1e308,
    -1e308,
    5e-324,
    0,
    -1,
    0.0,
    10**18,
    2**63,
    10**30,
    -(10**30),
    True,
    None,
    "",
    "0s",
    "0x4",
    "0x0x0",
    "../../etc",
    "pvc://c/../../etc",
    "s3://b//k",
    "LD_PRELOAD",
    "ACCEL_ATTEMPT",
    "CUDA_VISIBLE_DEVICES",
    "x" * 5000,
    "\u202e\U0001f600\u0000",
    "1e309",
    ".nan",
    [],
    {},
    [[[]]],
    {"a": {"b": {"c": 1}}},
    ["x"] * 300,
]


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path (keys and indexes) in a parsed document, the root excluded."""
    out: list[tuple[Any, ...]] = []
    if isinstance(node, dict):
        for k, v in node.items():
            out.append((*prefix, k))
            out.extend(paths(v, (*prefix, k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.append((*prefix, i))
            out.extend(paths(v, (*prefix, i)))
    return out


OPERATIONS = ("set", "delete", "add", "repeat", "wrap")


def _stable_key(value: Any) -> int:
    """A key number from ``value`` that every process computes alike (``hash()`` of a str is
    salted per process, so a seed would not reproduce its documents in another run)."""
    return zlib.crc32(str(value).encode("utf-8", "surrogatepass")) % 1000


def mutate(doc: dict[str, Any], op: str, where: int, value: Any) -> dict[str, Any]:
    """A copy of ``doc`` with one change at path number ``where`` (modulo the path count)."""
    out = copy.deepcopy(doc)
    found = paths(out)
    if not found:
        return out
    path = found[where % len(found)]
    parent: Any = out
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    if op == "set":
        parent[last] = value
    elif op == "delete":
        del parent[last]
    elif op == "add" and isinstance(parent, dict):
        parent[f"x{_stable_key(value)}"] = value
    elif op == "repeat":
        parent[last] = [parent[last]] * 200 if not isinstance(parent[last], list) else parent[last] * 50
    elif op == "wrap":
        parent[last] = {"v": parent[last]}
    return out


def render(doc: Any) -> str:
    """YAML text for a (mutated) document; NaN and infinities as YAML writes them."""
    return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False, width=10_000)


def example_docs() -> list[dict[str, Any]]:
    return [d for text in EXAMPLES.values() for d in yaml.safe_load_all(text) if isinstance(d, dict)]


def random_documents(rng: random.Random, count: int) -> Iterator[tuple[str, str]]:
    """``count`` hostile documents: the corpus, then mutations (1-3 changes) of the examples,
    some as text edits (a tag, an anchor, a truncation) after rendering."""
    docs = example_docs()
    for name, text in CORPUS[:count]:
        yield name, text
    for i in range(max(0, count - len(CORPUS))):
        doc = rng.choice(docs)
        for _ in range(rng.randint(1, 3)):
            value = rng.choice(HOSTILE_VALUES) if rng.random() < 0.8 else rng.uniform(-1e9, 1e9)
            doc = mutate(doc, rng.choice(OPERATIONS), rng.randrange(1 << 30), value)
        try:
            text = render(doc)
        except (ValueError, RecursionError):
            continue
        roll = rng.random()
        if roll < 0.1 and text:
            cut = rng.randrange(len(text))
            text = text[:cut]
        elif roll < 0.2:
            lines = text.splitlines()
            k = rng.randrange(len(lines)) if lines else 0
            tag = rng.choice(["!!int ", "!!float ", "!!bool ", "!!timestamp ", "!!str ", "!!binary ", "&a ", "*a "])
            if lines and ": " in lines[k]:
                key, _, rest = lines[k].partition(": ")
                lines[k] = f"{key}: {tag}{rest}"
            text = "\n".join(lines) + "\n"
        yield f"mutation-{i}", text


# --- running the CLI and judging what it did --------------------------------------------------

_PATH = re.compile(r"^(?:document \d+: )?(?:\(yaml\) |(?:\(document(?: \d+)?\)|--catalog|[^\s:]+): )")


@dataclass
class Outcome:
    command: str
    status: int | None = None
    stdout: str = ""
    stderr: str = ""
    traceback: str | None = None
    problems: list[str] = field(default_factory=list)  # broken rules, empty when all is well


def commands(path: str) -> list[tuple[str, list[str]]]:
    return [
        ("validate", ["validate", path]),
        ("plan", ["plan", path]),
        ("plan-json", ["plan", path, "-o", "json"]),
    ]


def run_cli(
    main: Callable[[list[str]], int], argv: list[str], name: str, passthrough: tuple[type[BaseException], ...] = ()
) -> Outcome:
    """``main(argv)`` in this process with stdout/stderr captured; exceptions are recorded,
    except ``passthrough`` ones (a caller's own timeout)."""
    out, err = io.StringIO(), io.StringIO()
    result = Outcome(command=name)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            result.status = main(argv)
        except passthrough:
            raise
        except SystemExit as exc:  # argparse
            result.status = exc.code if isinstance(exc.code, int) else 2
        except BaseException:
            result.traceback = traceback.format_exc()
    result.stdout, result.stderr = out.getvalue(), err.getvalue()
    return result


def judge(result: Outcome, input_size: int, source: str) -> Outcome:
    """Fill ``result.problems`` with every rule the run broke."""
    if result.traceback is not None:
        result.problems.append("traceback: " + result.traceback.strip().splitlines()[-1][:200])
    elif result.status not in (0, 2):
        result.problems.append(f"exit status {result.status}")
    if "Traceback" in result.stderr:
        result.problems.append("traceback printed")
    size = len(result.stdout.encode()) + len(result.stderr.encode())
    slack = OUTPUT_SLACK + (PLAN_SLACK if result.command.startswith("plan") and result.status == 0 else 0)
    if size > OUTPUT_FACTOR * input_size + slack:
        result.problems.append(f"output {size} bytes for {input_size} bytes of input")
    if result.command == "plan-json" and result.status == 0:
        if re.search(r"\b(NaN|-?Infinity)\b", result.stdout):
            result.problems.append("non-finite number in JSON")
        else:
            try:
                json.loads(result.stdout, parse_constant=_refuse_constant)
            except ValueError as exc:
                result.problems.append(f"output is not strict JSON: {str(exc)[:100]}")
    for line in result.stderr.splitlines():
        if not line.startswith("error: "):
            result.problems.append(f"stderr line without 'error: ': {line[:100]}")
            continue
        rest = line.removeprefix("error: ").removeprefix(f"{source}: ")
        if not _PATH.match(rest) and not re.fullmatch(r"\.\.\. and \d+ more", rest):
            result.problems.append(f"rejection without a field path: {line[:160]}")
    return result


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"non-finite constant {name}")
