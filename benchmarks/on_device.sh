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
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
exec python3 benchmarks/validate_device.py --out-dir "${OUT:-benchmarks/results}" "$@"
