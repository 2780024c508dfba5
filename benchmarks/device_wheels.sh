#!/usr/bin/env bash
# Run HERE, before lending a GPU machine a command: downloads into .whl/ (git-ignored) the wheels that
# benchmarks/on_device.sh installs THERE, where no package registry can be reached. The lent machines' image
# (.library/device/KINDS.md) has torch, transformers, peft, accelerate, rich, pyyaml and nvidia-ml-py but not
# pydantic, Liger-Kernel, TRL (activation offloading's row) or bitsandbytes; the versions are this checkout's environment's where it has them.
# About 48 MB: the working tree and the carried wheels must stay under the device's 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
version() { "$py" -c "import importlib.metadata as m; print(m.version('$1'))" 2>/dev/null || true; }
pin() { local v; v=$(version "$1"); if [ -n "$v" ]; then echo "$1==$v"; else echo "$1"; fi; }
rm -rf .whl && mkdir .whl
common=(--no-deps --only-binary=:all: --python-version 3.12 --implementation cp -d .whl)
for p in pydantic pydantic-core annotated-types typing-inspection typing-extensions liger-kernel trl; do
  "$py" -m pip download -q "${common[@]}" --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 "$(pin "$p")"
done
# bitsandbytes' wheels are tagged manylinux_2_24 (its QLoRA rows; skip with NO_BITSANDBYTES=1 to save 43 MB)
if [ -z "${NO_BITSANDBYTES:-}" ]; then
  "$py" -m pip download -q "${common[@]}" --platform manylinux_2_24_x86_64 "$(pin bitsandbytes)"
fi
du -sh .whl && ls .whl
