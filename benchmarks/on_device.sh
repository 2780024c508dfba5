#!/usr/bin/env bash
# Run THERE, on a lent GPU machine, with .whl carried (benchmarks/device_wheels.sh made it here): installs the
# wheels into /tmp/site, then runs benchmarks/validate_device.py with the given arguments, its records and
# markdown written to $OUT (what comes back) or benchmarks/results. Example (README, "Measuring on a GPU"):
#   bash benchmarks/on_device.sh --stack --edge --budget-s 480
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
out="${OUT:-benchmarks/results}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
# the log goes to $OUT too: a call its time limit stops returns what it printed up to then (the records say which
# row it stopped in; the log says where in that row)
python3 benchmarks/validate_device.py --out-dir "$out" "$@" 2>&1 | tee -a "$out/validate_device.log"
