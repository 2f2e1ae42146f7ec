"""Host-dispatch variants of the throughput model against every calibration set's tokens/s.

Small models' eager steps are paced by the host. The planner charges ``hostSecondsPerOp`` per
launch (20 µs in the catalog) and joins host and device time by root-sum-square
(``throughput._overlap``). Measured (``tests/data/calibration/host-overlap/``, docs/planner.md,
"Small models' host time"): the lent hosts issue a launch of these steps in 15-36 µs, and given
the host time measured, a step takes close to the longer of the two (a 4-norm), not their
root-sum-square. This script replans every set under variants of those figures and of the
constants counted in host ops (checkpointing's and FSDP2's per-layer host work) and prints each
set's median and worst |tokens/s error|, so that a change to them can be judged on all sets at once:

    PYTHONPATH=operator python bench/plan_host_fit.py [--published]

Variants are applied by replacing the module's constants and ``_overlap`` in this process only.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel_api import catalog
from accel_operator.planning import throughput

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import plan_accuracy as pa  # noqa: E402
from bench import plan_published as pp  # noqa: E402


@dataclass(frozen=True)
class Variant:
    label: str
    norm: float = 2.0  # the overlap's p-norm: 2 is today's root-sum-square
    host_scale: float = 1.0  # × every GPU's hostSecondsPerOp
    constants: dict[str, float] = field(default_factory=dict)  # throughput module constants


# The FSDP2 hook figures measured on the 2-H200 host in its own ops (fsdp-host/): 119 a layer with
# grad-op sharding and 160 with full sharding -> 78 hooks + 41 per all-gather pass.
MEASURED_FSDP = {"FSDP_HOOK_OPS_PER_LAYER": 78.0, "FSDP_HOST_OPS_PER_LAYER": 41.0}
VARIANTS = (
    Variant("today: root-sum-square, 20 µs a launch"),
    Variant("FSDP2 hooks as measured (119 / 160 ops a layer)", constants=MEASURED_FSDP),
    Variant("4-norm, 20 µs", norm=4.0),
    Variant(
        "4-norm, 20 µs, FSDP2 hooks as measured, checkpoint 130",
        4.0,
        1.0,
        MEASURED_FSDP | {"CHECKPOINT_HOST_OPS_PER_LAYER": 130.0},
    ),
    Variant("4-norm, 26 µs, checkpoint 60", 4.0, 1.3, {"CHECKPOINT_HOST_OPS_PER_LAYER": 60.0}),
    Variant(
        "4-norm, 30 µs (the median host), checkpoint 60, FSDP2 × 0.75",
        4.0,
        1.5,
        {"CHECKPOINT_HOST_OPS_PER_LAYER": 60.0, "FSDP_HOOK_OPS_PER_LAYER": 33.0, "FSDP_HOST_OPS_PER_LAYER": 28.0},
    ),
    Variant(
        "3-norm, 23 µs, checkpoint 80, FSDP2 × 1.25",
        3.0,
        1.15,
        {"CHECKPOINT_HOST_OPS_PER_LAYER": 80.0, "FSDP_HOOK_OPS_PER_LAYER": 55.0, "FSDP_HOST_OPS_PER_LAYER": 48.0},
    ),
)


@contextmanager
def applied(v: Variant) -> Iterator[catalog.Catalog]:
    """The throughput module under ``v``, and the catalog with its host scale; restored after."""
    saved = {name: getattr(throughput, name) for name in v.constants}
    overlap = throughput._overlap
    p = v.norm

    def norm(device: float, host: float) -> float:
        return float((device**p + host**p) ** (1 / p))

    try:
        for name, value in v.constants.items():
            setattr(throughput, name, value)
        if p != 2.0:
            throughput._overlap = norm
        cat = catalog.default()
        scaled = {
            k: dataclasses.replace(a, host_seconds_per_op=a.host_seconds_per_op * v.host_scale)
            for k, a in cat.accelerators.items()
        }
        yield dataclasses.replace(cat, accelerators=scaled)
    finally:
        throughput._overlap = overlap
        for name, value in saved.items():
            setattr(throughput, name, value)


def _summary(errors: Sequence[float]) -> str:
    a = [abs(e) for e in errors]
    return f"{statistics.median(a) * 100:.1f} / {max(a) * 100:.1f}"


SETS: tuple[tuple[str, Callable[[], list[dict[str, Any]]]], ...] = (
    ("single GPU", lambda: pa.read_rows(pa.calibration_files())),
    ("several GPUs", lambda: pa.read_rows(pa.multi_gpu_files())),
    ("LoRA", lambda: pa.read_rows(pa.lora_files())),
    ("pipeline", lambda: pa.read_rows(pa.pipeline_files())),
    ("ckpt-host", pa.ckpt_host_rows),
)


def main(argv: Sequence[str]) -> int:
    published = "--published" in argv
    rows = {name: read() for name, read in SETS}
    pub_rows = pp.read_rows() if published else []
    head = [name for name, _ in SETS] + (["published"] if published else [])
    print("| variant | " + " | ".join(head) + " |")
    print("| --- |" + " --- |" * len(head))
    for v in VARIANTS:
        cells = []
        with applied(v) as cat:
            for name, _ in SETS:
                cs = pa.compare(rows[name], cat)
                cells.append(_summary([e for c in cs if (e := c.speed_error()) is not None]))
            if published:
                cells.append(_summary([c.error() for c in pp.compare(pub_rows, cat)]))
        print(f"| {v.label} | " + " | ".join(cells) + " |", flush=True)
    print("(median / worst |tokens/s error|, %)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
