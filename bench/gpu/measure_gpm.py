"""Check the agent's profiling counters and the ``top`` diagnosis on a real GPU: an idle spell, a
deliberately input-starved training loop, a compute-bound one and a memory-bound one, while the
agent's own NVML backend (``accel_agent.backends.nvml.NvmlBackend``, the real code) samples every
second.

Needs torch and nvidia-ml-py (pynvml), and pydantic for the agent's models. It imports the
backend without ``accel_agent/__init__`` (which starts the whole agent: Prometheus, the
Kubernetes client), so nothing else is needed. Run from the repository root:

    OUT=gpm-out python bench/gpu/measure_gpm.py [--seconds 40] [--quick]

The phases, one after the other, in one process on device 0:

- ``idle``: nothing runs (a baseline, 5 s);
- ``starved``: a bf16 MLP (a 1024→8192 input layer and three 8192-wide layers) trained on 4096
  tokens a step, each batch from a data loader that sleeps 50 ms (slow CPU decoding) and makes it
  on the CPU: a step is a few milliseconds of GPU, so the device mostly waits;
- ``compute``: a bf16 MLP of four 8192-wide layers trained on 16384 tokens a step, data already
  on the device: big matrix products, tensor cores busy;
- ``memory``: copies of a 4 GiB tensor (bandwidth, no arithmetic), half as long.

Writes ``$OUT/gpm_samples.jsonl`` (one line per sample: the phase, whether the sample covers the
phase alone (``steady``), the card's name as NVML gives it, the profile counters, utilization and
memory, and the diagnosis) and ``$OUT/gpm_summary.json`` (per phase the median counters, the
diagnoses counted, the loop's steps per second; the card, driver, torch).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import threading
import time
import types
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for src in ("operator", "agent"):
    if str(ROOT / src) not in sys.path:
        sys.path.insert(0, str(ROOT / src))
# The backend alone: a package object for accel_agent whose __init__ (the whole agent) is not run.
if "accel_agent" not in sys.modules:
    _pkg = types.ModuleType("accel_agent")
    _pkg.__path__ = [str(ROOT / "agent" / "accel_agent")]
    sys.modules["accel_agent"] = _pkg

from accel_agent.backends.nvml import NvmlBackend  # noqa: E402
from accel_operator.reconcile.nodes import diagnose  # noqa: E402


class Sampler(threading.Thread):
    """Samples the agent's backend every ``period`` seconds, tagging each sample with the phase."""

    def __init__(self, period: float, out: Any) -> None:
        super().__init__(daemon=True)
        self.backend = NvmlBackend(xid_events=False)
        self.period = period
        self.out = out
        self.phase = "start"
        self.stop = threading.Event()
        self.rows: list[dict[str, Any]] = []
        self.meta: dict[str, Any] = {}

    def run(self) -> None:
        previous = None
        while not self.stop.is_set():
            phase = self.phase
            sample = self.backend.sample()
            self.meta.setdefault("driver", sample.driver_version)
            self.meta.setdefault("unsupported_calls", list(sample.unsupported_calls))
            for d in sample.devices[:1]:
                counters = diagnose.Counters.of(d.profile, d.utilization_gpu_percent, d.utilization_memory_percent)
                found = diagnose.diagnose([counters])
                row = {
                    "t": round(time.time(), 3),
                    "phase": phase,
                    "steady": previous == phase,  # the interval since the last sample lies in this phase
                    "card": d.name,
                    "utilization_gpu_percent": d.utilization_gpu_percent,
                    "utilization_memory_percent": d.utilization_memory_percent,
                    "memory_used_bytes": d.memory_used_bytes,
                    "memory_total_bytes": d.memory_total_bytes,
                    "profile": d.profile.model_dump(mode="json", exclude_none=True) if d.profile else None,
                    "diagnosis": {"verdict": found.verdict.value, "line": found.line},
                }
                self.rows.append(row)
                self.out.write(json.dumps(row) + "\n")
                self.out.flush()
            previous = phase
            self.stop.wait(self.period)
        self.backend.close()


def idle(seconds: float) -> float:
    time.sleep(seconds)
    return 0.0


def starved(torch: Any, seconds: float) -> float:
    """A model whose step is a few milliseconds of GPU, fed by a loader that takes 50 ms a batch."""
    width, tokens, features = 8192, 4096, 1024
    model = torch.nn.Sequential(
        torch.nn.Linear(features, width, bias=False),
        *[m for _ in range(3) for m in (torch.nn.GELU(), torch.nn.Linear(width, width, bias=False))],
    )
    model = model.cuda().to(torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)

    def loader() -> Any:
        while True:
            time.sleep(0.05)  # the slow CPU loader: reading, decoding, augmenting
            yield torch.randn(tokens, features)

    steps, end, batches = 0, time.monotonic() + seconds, loader()
    while time.monotonic() < end:
        x = next(batches).cuda().to(torch.bfloat16)
        model(x).float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        steps += 1
    return steps / seconds


def compute(torch: Any, seconds: float) -> float:
    width, tokens = 8192, 16384
    layers = [torch.nn.Linear(width, width, bias=False) for _ in range(4)]
    model = torch.nn.Sequential(*[m for layer in layers for m in (layer, torch.nn.GELU())]).cuda().to(torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(tokens, width, device="cuda", dtype=torch.bfloat16)
    steps, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        model(x).float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        steps += 1
    return steps / seconds


def memory(torch: Any, seconds: float) -> float:
    a = torch.empty(1 << 30, device="cuda", dtype=torch.float32)  # 4 GiB
    b = torch.empty_like(a)
    steps, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        b.copy_(a)
        torch.cuda.synchronize()
        steps += 1
    return steps / seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=40.0, help="length of the starved and compute phases")
    parser.add_argument("--quick", action="store_true", help="3-second phases: a check that everything runs")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args(argv)
    torch: Any = importlib.import_module("torch")  # untyped, as in the other bench/gpu scripts
    seconds = 3.0 if args.quick else args.seconds
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rates: dict[str, float] = {}
    with (out / "gpm_samples.jsonl").open("w") as f:
        sampler = Sampler(1.0, f)
        torch.zeros(1, device="cuda")  # the CUDA context first: its start is not a phase
        sampler.start()
        try:
            for name, run, length in (
                ("idle", idle, min(5.0, seconds)),
                ("starved", lambda s: starved(torch, s), seconds),
                ("compute", lambda s: compute(torch, s), seconds),
                ("memory", lambda s: memory(torch, s), seconds / 2),
            ):
                sampler.phase = name
                print(f"phase {name}: {length:.0f} s", flush=True)
                rates[name] = round(run(length), 2)
                torch.cuda.empty_cache()
        finally:
            sampler.phase = "end"
            time.sleep(1.2)
            sampler.stop.set()
            sampler.join(timeout=10)
    summary: dict[str, Any] = {
        "card": next((r["card"] for r in sampler.rows if r["card"]), None),
        "torch": torch.__version__,
        "cuda_name": torch.cuda.get_device_name(0),
        **sampler.meta,
        "steps_per_second": rates,
        "phases": {},
    }
    for phase in rates:
        steady = [r for r in sampler.rows if r["phase"] == phase and r["steady"] and r["profile"]]
        keys = sorted({k for r in steady for k, v in r["profile"].items() if isinstance(v, int | float)})
        summary["phases"][phase] = {
            "samples": len(steady),
            "median": {k: statistics.median(r["profile"][k] for r in steady if k in r["profile"]) for k in keys},
            "median_utilization_gpu_percent": statistics.median(r["utilization_gpu_percent"] or 0 for r in steady)
            if steady
            else None,
            "verdicts": dict(Counter(r["diagnosis"]["verdict"] for r in steady)),
        }
    (out / "gpm_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
