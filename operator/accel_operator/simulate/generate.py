"""Synthetic traces for ``accelctl simulate``, shaped after published studies of GPU clusters.

What the studies report, and what this generator takes from each (the exact percentages below are
this generator's choices within those shapes, not figures copied from the papers):

* Microsoft Philly (Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN
  Training Workloads", USENIX ATC 2019): a two-month trace of a multi-tenant cluster of DNN
  training jobs, where gang scheduling and locality make large jobs queue longest and most jobs
  ask for one GPU or a few. Here: job sizes are heavy at one device and fall off by powers of two
  (1, 2, 4, 8, 16, 32, 64 devices), and run lengths are log-normal (minutes to days).
* Alibaba PAI (Weng et al., "MLaaS in the Wild", NSDI 2022): a two-month trace of a production
  cluster of 6,742 GPUs, over 1,300 users; the submissions are heavily skewed by user (about 77%
  of task instances from the top 5% of users) and most instances (about 85%) need gang
  scheduling. Here: teams are drawn with a skewed (Zipf-like) weight, and arrivals follow a
  diurnal and weekly rhythm (a non-homogeneous Poisson process, busier in working hours and on
  weekdays).

Each job is written in the trace's compact form: the model preset and token count are chosen so
the planner's duration lands near the drawn run length; inference jobs are a share of the small
ones; deadlines (for a share of the jobs) are a multiple of the expected run; spot is preferred
with a checkpoint interval for training, never for the tightest deadlines.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

TEAMS = ("research", "platform", "vision", "speech", "ads", "search")
# Tokens per second per device at each preset, about what the planner reports on H100 (training)
# and L4 (inference: tokens generated) with the compact form's settings: its model, not a
# measurement. The generator turns a drawn run length into tokens with them.
_TPS = {"tinyllama-1.1b": 38_000.0, "llama-3-8b": 7_700.0, "llama-3-70b": 1_000.0}
_INFERENCE_TPS = 39.0
MAX_JOBS = 200_000
MAX_DAYS = 366


def _devices(rng: random.Random) -> int:
    """Sizes heavy at one device, falling off by powers of two (Philly's shape)."""
    roll = rng.random()
    for size, cumulative in ((1, 0.55), (2, 0.65), (4, 0.78), (8, 0.92), (16, 0.97), (32, 0.99)):
        if roll < cumulative:
            return size
    return 64


def _hourly_weight(t: float) -> float:
    """Arrival intensity at ``t`` seconds (relative): working hours and weekdays are busier."""
    hour = (t / 3600.0) % 24
    day = int(t // 86_400) % 7
    diurnal = 1.0 + 0.8 * math.sin((hour - 9.0) / 24.0 * 2 * math.pi)
    return diurnal * (0.5 if day >= 5 else 1.0)


def generate(jobs: int, days: float, seed: int) -> list[dict[str, Any]]:
    """``jobs`` compact trace lines over ``days``, deterministic from ``seed``."""
    if not 1 <= jobs <= MAX_JOBS:
        raise ValueError(f"--jobs: must be 1 to {MAX_JOBS}")
    if not 0 < days <= MAX_DAYS:
        raise ValueError(f"--days: must be more than 0 and at most {MAX_DAYS}")
    rng = random.Random(seed)
    span = days * 86_400.0
    # Arrivals by thinning: uniform candidates kept with the rhythm's weight (its maximum is 1.8).
    times: list[float] = []
    while len(times) < jobs:
        t = rng.uniform(0, span)
        if rng.random() * 1.8 <= _hourly_weight(t):
            times.append(t)
    times.sort()
    weights = [1.0 / (i + 1) ** 1.2 for i in range(len(TEAMS))]  # skewed by team (PAI's shape)
    out: list[dict[str, Any]] = []
    for t in times:
        team = rng.choices(TEAMS, weights)[0]
        devices = _devices(rng)
        # Run length: log-normal, median about 1.5 hours, a long tail to days (clipped at 3 days).
        hours = min(72.0, math.exp(rng.gauss(math.log(1.5), 1.3)))
        model = "tinyllama-1.1b" if devices <= 2 else "llama-3-8b" if devices <= 16 else "llama-3-70b"
        inference = devices <= 2 and rng.random() < 0.2
        rate = _INFERENCE_TPS if inference else _TPS[model]
        tokens = max(10_000, int(rate * devices * hours * 3600.0))
        line: dict[str, Any] = {
            "submit": round(t, 1),
            "team": team,
            "model": model,
            "workload": "inference" if inference else "training",
            "tokens": tokens,
            "devices": devices,
        }
        if rng.random() < 0.4:  # a deadline: 2 to 6 times the expected run, at least 4 hours
            line["deadlineHours"] = round(max(4.0, hours * rng.uniform(2.0, 6.0)), 1)
        tight = "deadlineHours" in line and line["deadlineHours"] < 2.5 * hours
        line["spot"] = "never" if tight or inference else "prefer"
        if not inference:
            line["checkpointMinutes"] = rng.choice((15, 20, 30, 60))
        out.append(line)
    return out


def to_jsonl(lines: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)
