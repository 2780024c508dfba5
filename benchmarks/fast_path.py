"""Cold wall time of the fast path against `python -c "import torch"` (target: well under half).

Usage: .venv/bin/python benchmarks/fast_path.py [--runs N]
Writes benchmarks/results/fast_path.md. Each run is a fresh interpreter; the median is reported.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Bytecode caching on, as in a user's interpreter (a sandbox's PYTHONDONTWRITEBYTECODE would recompile every
#: module on every run and time the compiler instead of advisor).
ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, "HF_HUB_OFFLINE": "1",
       "PYTHONPATH": str(ROOT)}
COMMANDS = {
    'python -c "import torch"': [sys.executable, "-c", "import torch"],
    "advisor recommend --model gpt2 --json": [sys.executable, "-m", "advisor", "recommend", "--model", "gpt2", "--json"],
    "advisor recommend --model gpt2 (rich report)": [sys.executable, "-m", "advisor", "recommend", "--model", "gpt2"],
    "advisor recommend --model meta-llama/Llama-2-7b-hf --gpu a100-80gb:8 --json":
        [sys.executable, "-m", "advisor", "recommend", "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "a100-80gb:8",
         "--json"],
    "advisor estimate --model gpt2 --gpu t4 --json":
        [sys.executable, "-m", "advisor", "estimate", "--model", "gpt2", "--gpu", "t4", "--json"],
}


def wall(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=ENV, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    rows = []
    for name, cmd in COMMANDS.items():
        wall(cmd)  # warm the OS file cache: "cold" means a fresh interpreter, not a cold disk
        times = [wall(cmd) for _ in range(args.runs)]
        rows.append((name, statistics.median(times), min(times), max(times)))
    torch_s = rows[0][1]
    lines = [f"# Fast path: cold wall time ({date.today()}, {platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} cores, Python {platform.python_version()}, {args.runs} runs, median)", "",
             "| command | median s | min s | max s | vs import torch |", "|---|---:|---:|---:|---:|"]
    for name, med, lo, hi in rows:
        lines.append(f"| `{name}` | {med:.3f} | {lo:.3f} | {hi:.3f} | {med / torch_s:.0%} |")
    text = "\n".join(lines) + "\n"
    (ROOT / "benchmarks" / "results" / "fast_path.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
