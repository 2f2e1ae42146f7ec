#!/usr/bin/env bash
# The node agent installs and runs without the operator: a fresh virtualenv with only accel-api
# and accel-agent (non-editable, as an image would have them) must import and run the agent,
# and must not contain kopf or the operator. Run by `bash hack/dev.sh test`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
alone=$root/.cache/agent-alone
rm -rf "$alone"
python3 -m venv "$alone/venv"
# Build from copies: pip builds a local project in place, and its build/ folders must not land in
# the source tree.
mkdir -p "$alone/src"
cp -r operator/accel_api agent "$alone/src/"
rm -rf "$alone/src/accel_api/"*.egg-info "$alone/src/agent/"*.egg-info
"$alone/venv/bin/python" -m pip install -q -c constraints.txt "$alone/src/accel_api" "$alone/src/agent"
(cd "$alone" && ./venv/bin/python - <<'PY'
import importlib.util, json, subprocess, sys, tempfile
assert importlib.util.find_spec("kopf") is None, "installing the agent brought kopf"
assert importlib.util.find_spec("accel_operator") is None, "installing the agent brought the operator"
import accel_agent  # noqa: F401
out = tempfile.mktemp(suffix=".json")
rc = subprocess.call([sys.executable, "-m", "accel_agent", "--once", "--backend", "fake", "--node-name", "n1", "--output", out])
report = json.load(open(out))
assert rc == 0 and report["kind"] == "AcceleratorNodeReport", (rc, report)
print(f"agent alone: {len(report['status']['devices'])} devices reported, kopf not installed")
PY
)
