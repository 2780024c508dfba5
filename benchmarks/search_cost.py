"""CPU seconds of the planner's search over a grid of catalog scenarios (issue 41's targets: at most 1 s each).

Usage: .venv/bin/python benchmarks/search_cost.py [--runs N] [--out PATH]

Each scenario runs as ``advisor ARGS`` in a fresh interpreter, and the CPU time of that whole process (user +
system, ``resource.getrusage(RUSAGE_CHILDREN)``) is what counts, as a user's shell would measure it: imports, the
model profile, the search and the report. The median of ``--runs`` runs is reported, the slowest case named.
Writes benchmarks/results/search_cost.md (the machine, the date, a row per scenario).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {
    **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
    "HF_HUB_OFFLINE": "1",
    "PYTHONPATH": str(ROOT),
}
#: (target CPU seconds, advisor arguments): 1-16 nodes, dense and mixtures of experts, 125M-70B, a no-fit answer,
#: 64 and 128 GPUs a node.
SCENARIOS: list[tuple[float, str]] = [
    (0.35, "recommend --model gpt2 --json"),
    (1.0, "recommend --model gpt2 --gpu a100-80gb"),
    (1.0, "recommend --model meta-llama/Llama-3.2-1B --gpu rtx-4090"),
    (1.0, "recommend --model meta-llama/Llama-3.1-8B --gpu a100-80gb:8"),
    (1.0, "recommend --model meta-llama/Llama-3.1-8B --gpu l4 --seq-len 4096"),
    (1.0, "recommend --model Qwen/Qwen3-30B-A3B --gpu a100-80gb:8"),
    (1.0, "recommend --model mistralai/Mixtral-8x7B-v0.1 --gpu h100-sxm:8 --nodes 2"),
    (1.0, "recommend --model meta-llama/Llama-3.1-70B --gpu h100-sxm:8 --nodes 2 --seq-len 4096"),
    (
        1.0,
        "recommend --model meta-llama/Llama-3.1-70B --gpu h100-sxm:8 --nodes 16 --seq-len 8192 --global-batch-size 256",
    ),
    (1.0, "recommend --model meta-llama/Llama-3.1-70B --gpu rtx-a6000 --seq-len 2048 --global-batch-size 16"),
    (1.0, "recommend --model meta-llama/Llama-3.2-1B --gpu a100-80gb --cuda-context 85GB"),
    (1.0, "estimate --model gpt2-xl --gpu v100-32gb:64"),
    (0.5, "probe --gpu a100-80gb:128"),
]


def cpu_seconds(args: str) -> tuple[float, int]:
    """CPU seconds (user + system) of one ``advisor ARGS`` process, and its exit code."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, "-m", "advisor", *shlex.split(args)],
        env=ENV,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done.returncode


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "search_cost.md")
    args = parser.parse_args()
    rows = []
    for target, scenario in SCENARIOS:
        cpu_seconds(scenario)  # warm the file cache and the bytecode
        runs = [cpu_seconds(scenario) for _ in range(args.runs)]
        median = statistics.median(t for t, _ in runs)
        rows.append((scenario, median, target, runs[0][1]))
        print(f"{median:7.2f} s  (target {target:.2f})  exit {runs[0][1]}  advisor {scenario}", file=sys.stderr)
    slowest = max(rows, key=lambda r: r[1])
    lines = [
        f"# Search cost: CPU seconds of `advisor ARGS` (median of {args.runs})",
        "",
        f"{date.today()}, {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}. `python benchmarks/search_cost.py` makes this file.",
        "",
        "| advisor | CPU s | target | met | exit |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| `{s}` | {t:.2f} | {target:.2f} | {'yes' if t <= target else 'no'} | {code} |" for s, t, target, code in rows
    ]
    lines += [
        "",
        f"Slowest: `{slowest[0]}` at {slowest[1]:.2f} s; {sum(t <= g for _, t, g, _ in rows)} of "
        f"{len(rows)} within their target.",
    ]
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
