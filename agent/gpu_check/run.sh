#!/usr/bin/env bash
# Real-GPU check of the node agent (accel_agent), for a machine with one NVIDIA GPU, PyTorch,
# pynvml and NO network. Run it from the repository root with $OUT set to an empty folder:
#
#     OUT=/some/empty/dir bash agent/gpu_check/run.sh
#
# It (1) makes the agent's Python dependencies importable, from the system if it has them, else
# from wheels in ./.cache/wheels; (2) starts a real PyTorch training loop in the background;
# (3) while it trains, runs `python -m accel_agent --once` and a 20-second `--loop-seconds` run;
# (4) probes every NVML call the agent uses; (5) saves `nvidia-smi -q`; (6) checks the report.
# It exits non-zero when the agent failed (crashed, wrote no report, or a report without devices).
# Everything finishes in well under 3 minutes.
#
# The wheels folder is built beforehand on a machine with PyPI access, from the repository root
# (one pass per CPython version the GPU machine might have; pure-Python wheels are shared):
#
#   for v in 3.11 3.12 3.13; do
#     python3 -m pip download -c constraints.txt --only-binary=:all: --implementation cp \
#       --python-version "$v" --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
#       --platform manylinux2014_x86_64 -d .cache/wheels \
#       'pydantic>=2.7,<3' 'pydantic-settings>=2.3,<3' 'prometheus-client>=0.20' 'PyYAML>=6' \
#       'kubernetes>=30' 'grpcio>=1.60' 'nvidia-ml-py>=12.535'
#   done
#
# That resolves pydantic, pydantic-core, pydantic-settings, prometheus-client, PyYAML,
# typing-extensions, annotated-types, typing-inspection, python-dotenv, nvidia-ml-py, grpcio and
# the Kubernetes client (the agent imports both at start, even when it talks to no API) with what
# it needs: requests, urllib3, aiohttp and the rest (KUBE_DISTS below).
# .cache/ is git-ignored: the runner must carry .cache/wheels along explicitly.

set -uo pipefail
: "${OUT:?set OUT to an empty folder for the results}"
mkdir -p "$OUT"
PY=${PYTHON:-python3}
ROOT=$(pwd)
WORK=$(mktemp -d /tmp/accel-gpu-check.XXXXXX)
LOG="$OUT/gpu-check.log"
NODE=${NODE_NAME:-h100-check}
TRAIN_PID=""
START=$(date +%s)

log() { echo "[gpu-check +$(( $(date +%s) - START ))s] $*" | tee -a "$LOG" >&2; }
cleanup() {
  if [[ -n "$TRAIN_PID" ]] && kill -0 "$TRAIN_PID" 2>/dev/null; then
    kill "$TRAIN_PID" 2>/dev/null
    wait "$TRAIN_PID" 2>/dev/null
  fi
}
trap cleanup EXIT

# --- 0. where we are ----------------------------------------------------------------------------
log "python: $($PY -c 'import sys; print(sys.executable, sys.version.split()[0])' 2>&1)"
log "system pydantic: $($PY -c 'import pydantic; print(pydantic.VERSION)' 2>&1 | tail -1)"
log "system pynvml: $($PY -c 'import pynvml, importlib.metadata as m; print(m.version("nvidia-ml-py"))' 2>&1 | tail -1)"
[[ -f operator/accel_api/__init__.py && -f agent/accel_agent/__init__.py ]] || {
  log "FAIL: run me from the repository root (operator/accel_api and agent/accel_agent not found)"; exit 2; }

# --- 1. the agent's dependencies ------------------------------------------------------------------
DEPS_CHECK='
import importlib.metadata as m, pydantic, pydantic_settings, prometheus_client, yaml, kubernetes, grpc
major, minor = (int(x) for x in pydantic.VERSION.split(".")[:2])
assert major == 2 and minor >= 7, "pydantic " + pydantic.VERSION + " is older than 2.7"
major, minor = (int(x) for x in m.version("pydantic-settings").split(".")[:2])
assert (major, minor) >= (2, 3), "pydantic-settings too old"
'
DEPS="$WORK/site"
AGENT_PATH="$ROOT/operator:$ROOT/agent"
if $PY -c "$DEPS_CHECK" >>"$LOG" 2>&1; then
  log "dependencies: the system python has them"
else
  log "dependencies: installing from .cache/wheels into $DEPS"
  NEED=('pydantic>=2.7,<3' 'pydantic-settings>=2.3,<3' 'prometheus-client>=0.20' 'PyYAML>=6' 'kubernetes>=30' 'grpcio>=1.60')
  if ! $PY -c 'import pynvml' 2>/dev/null; then NEED+=('nvidia-ml-py>=12.535'); fi
  if ! ls .cache/wheels/*.whl >/dev/null 2>&1; then
    log "FAIL: dependencies missing and no wheels in .cache/wheels (see the pip download command at the top)"
    exit 2
  fi
  if ! $PY -m pip install -q --no-index --find-links .cache/wheels --target "$DEPS" --no-compile \
      --no-cache-dir --disable-pip-version-check "${NEED[@]}" >>"$LOG" 2>&1; then
    log "pip could not install them; unpacking the wheels directly"
    # The Kubernetes client and what it depends on (kubernetes 37's requirements, resolved)
    KUBE_DISTS=(kubernetes certifi python_dateutil six websocket_client requests requests_oauthlib oauthlib
                urllib3 charset_normalizer idna durationpy aiohttp aiohttp_retry aiohappyeyeballs aiosignal
                attrs frozenlist multidict propcache yarl)
    DISTS=(pydantic pydantic_core pydantic_settings prometheus_client pyyaml typing_extensions
           annotated_types typing_inspection python_dotenv grpcio "${KUBE_DISTS[@]}")
    if ! $PY -c 'import pynvml' 2>/dev/null; then DISTS+=(nvidia_ml_py); fi
    $PY agent/gpu_check/install_wheels.py .cache/wheels "$DEPS" "${DISTS[@]}" >>"$LOG" 2>&1 || {
      log "FAIL: could not unpack the wheels (see $LOG)"; exit 2; }
  fi
  AGENT_PATH="$DEPS:$AGENT_PATH"
  PYTHONPATH="$AGENT_PATH" $PY -c "$DEPS_CHECK" >>"$LOG" 2>&1 || {
    log "FAIL: dependencies still not importable (see $LOG)"; exit 2; }
fi
agent() { PYTHONPATH="$AGENT_PATH${PYTHONPATH:+:$PYTHONPATH}" timeout 120 $PY "$@"; }
agent -c 'import accel_agent, accel_api; print("agent importable")' >>"$LOG" 2>&1 || {
  log "FAIL: accel_agent does not import (see $LOG)"; exit 2; }

# --- 2. a real training loop in the background --------------------------------------------------
cat >"$WORK/train_load.py" <<'PYEOF'
"""A small transformer trained on random tokens (bf16 autocast, fused AdamW) for --seconds."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
from torch import nn


class TinyLM(nn.Module):
    def __init__(self, vocab: int, d_model: int, layers: int, heads: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.encoder(self.embed(ids)))
        return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--ready-file", type=Path, required=True)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=512)
    args = ap.parse_args()
    print(json.dumps({"event": "start", "pid": os.getpid(), "torch": torch.__version__}), flush=True)
    if not torch.cuda.is_available():
        print(json.dumps({"event": "error", "error": "CUDA not available"}), flush=True)
        return 1
    dev = torch.device("cuda")
    vocab = 32000
    model = TinyLM(vocab, 1024, 6, 16).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    loss_fn = nn.CrossEntropyLoss()
    started = time.monotonic()
    last_print = 0.0
    step = 0
    while time.monotonic() - started < args.seconds:
        ids = torch.randint(0, vocab, (args.batch, args.seq), device=dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(ids)
            loss = loss_fn(logits.view(-1, vocab).float(), ids.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        if step == 1:
            torch.cuda.synchronize()
            args.ready_file.write_text(str(os.getpid()))
        now = time.monotonic() - started
        if now - last_print >= 5.0:
            torch.cuda.synchronize()
            last_print = now
            print(
                json.dumps(
                    {
                        "event": "step",
                        "pid": os.getpid(),
                        "step": step,
                        "seconds": round(now, 1),
                        "loss": round(float(loss), 3),
                        "reserved_bytes": torch.cuda.memory_reserved(),
                        "allocated_bytes": torch.cuda.memory_allocated(),
                    }
                ),
                flush=True,
            )
    print(json.dumps({"event": "done", "pid": os.getpid(), "steps": step}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
PYEOF
READY="$WORK/train.ready"
$PY "$WORK/train_load.py" --seconds 75 --ready-file "$READY" >"$WORK/train.log" 2>&1 &
TRAIN_PID=$!
log "training started, pid $TRAIN_PID"
for _ in $(seq 1 120); do
  [[ -f "$READY" ]] && break
  kill -0 "$TRAIN_PID" 2>/dev/null || break
  sleep 0.5
done
if [[ ! -f "$READY" ]]; then
  log "WARNING: training did not reach its first step (see below); the agent runs anyway"
  cat "$WORK/train.log" >>"$LOG"
fi
TORCH_PID=$(cat "$READY" 2>/dev/null || echo "$TRAIN_PID")
log "training ready: pid $TORCH_PID"

# --- 3. the agent: one pass, then a 20-second loop ----------------------------------------------
FAILED=0
log "agent --once"
agent -m accel_agent --once --backend nvml --node-name "$NODE" --output "$OUT/h100-report.json" \
  --log-level INFO 2>>"$LOG"
RC_ONCE=$?
log "agent --once exit $RC_ONCE"
[[ $RC_ONCE -eq 0 && -s "$OUT/h100-report.json" ]] || FAILED=1

log "agent --loop-seconds 20 --interval 1"
agent -m accel_agent --loop-seconds 20 --interval 1 --backend nvml --node-name "$NODE" \
  --output "$OUT/h100-loop-report.json" --stats-output "$OUT/h100-agent-stats.json" --log-level WARNING 2>>"$LOG"
RC_LOOP=$?
log "agent --loop-seconds exit $RC_LOOP"
[[ $RC_LOOP -eq 0 && -s "$OUT/h100-agent-stats.json" ]] || FAILED=1

# --- 4. NVML probe, nvidia-smi ------------------------------------------------------------------
agent agent/gpu_check/nvml_probe.py --output "$OUT/nvml-probe.json" >>"$LOG" 2>&1 || log "probe exit $?"
timeout 60 nvidia-smi -q >"$OUT/nvidia-smi-q.txt" 2>&1 || log "nvidia-smi -q exit $?"

cleanup
TRAIN_PID=""
cat "$WORK/train.log" >>"$LOG"

# --- 5. checks ----------------------------------------------------------------------------------
agent - "$OUT" "$TORCH_PID" "$FAILED" <<'PYEOF' 2>>"$LOG"
import json, sys
from pathlib import Path
from accel_api.nodereport import AcceleratorNodeReport

out, torch_pid, failed = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
checks = {}

def check(name, ok, detail="", hard=False):
    checks[name] = {"ok": bool(ok), "hard": hard, "detail": detail}

for name in ("h100-report.json", "h100-loop-report.json"):
    path = out / name
    if not path.exists():
        check(f"{name}: written", False, "missing", hard=True)
        continue
    try:
        report = AcceleratorNodeReport.model_validate(json.loads(path.read_text()))
    except ValueError as exc:
        check(f"{name}: valid AcceleratorNodeReport", False, str(exc)[:500], hard=True)
        continue
    status = report.status
    devices = status.devices if status else []
    check(f"{name}: valid AcceleratorNodeReport", True)
    check(f"{name}: has devices", bool(devices), f"{len(devices)} devices", hard=True)
    check(f"{name}: node healthy", bool(status and status.healthy), "; ".join(status.problems) if status else "")
    pids = sorted(p.pid for d in devices for p in d.processes)
    check(f"{name}: training pid {torch_pid} among processes", torch_pid in pids, f"pids {pids}")
    d0 = devices[0] if devices else None
    if d0 is not None:
        check(f"{name}: memory used > 1 GiB", (d0.memory_used_bytes or 0) > 2**30, str(d0.memory_used_bytes))
        check(f"{name}: utilization read", d0.utilization_gpu_percent is not None, str(d0.utilization_gpu_percent))
        check(f"{name}: power read", d0.power_watts is not None, str(d0.power_watts))
        check(f"{name}: not supported", True, ", ".join(d0.not_supported) or "nothing")
stats_path = out / "h100-agent-stats.json"
if stats_path.exists():
    stats = json.loads(stats_path.read_text())
    check("stats: samples >= 10", stats.get("samples", 0) >= 10, str(stats.get("samples")), hard=True)
    cpu = stats.get("cpu_seconds_per_sample", {}).get("mean")
    check("stats: cpu per sample < 0.1 s", cpu is not None and cpu < 0.1, str(cpu))
else:
    check("stats: written", False, "missing", hard=True)
hard_fail = failed or any(c["hard"] and not c["ok"] for c in checks.values())
(out / "h100-checks.json").write_text(json.dumps({"passed": not hard_fail, "checks": checks}, indent=2) + "\n")
for name, c in checks.items():
    print(("ok   " if c["ok"] else ("FAIL " if c["hard"] else "warn ")) + name + (": " + c["detail"] if c["detail"] else ""))
sys.exit(1 if hard_fail else 0)
PYEOF
RC_CHECK=$?
log "checks exit $RC_CHECK; total $(( $(date +%s) - START ))s"
rm -rf "$WORK"
exit $(( RC_CHECK != 0 ? 1 : FAILED ))
