"""The training callback's own cost: seconds per optimizer step of advisor.integrations.Tracker, without a model (issue
46: under 1 % of a training step).

Usage: .venv/bin/python benchmarks/tracker_overhead.py [--steps N] [--out PATH]

Runs ``Tracker.step`` N times (a warm-up of 2, then a measuring window of N - 2, the store off) and writes
benchmarks/results/tracker_overhead.md: the median of 5 runs, per step, and the share of a 20 ms and a 1 s step.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from datetime import date
from pathlib import Path

from advisor.core.plan import Plan
from advisor.integrations import Tracker

ROOT = Path(__file__).resolve().parents[1]


def per_step_seconds(steps: int) -> float:
    """Seconds one ``Tracker.step`` costs, the median of 5 runs of ``steps`` steps."""
    plan = Plan(
        device="cpu",
        precision="fp32",
        tf32=False,
        optimizer="adamw",
        gradient_checkpointing=False,
        micro_batch_size=1,
        gradient_accumulation_steps=1,
        parallelism="none",
        num_gpus=0,
    )
    prediction = {
        "plan": plan.model_dump(mode="json"),
        "memory": {"peak_bytes": 2**30, "device_bytes": 2**30},
        "speed": {"step_time_s": 1e-3, "tokens_per_s": 64_000.0, "samples_per_s": 1000.0},
    }
    runs = []
    for _ in range(5):
        tracker = Tracker(prediction, warmup_steps=2, measure_steps=steps - 2, store=False)
        started = time.perf_counter()
        for _ in range(steps):
            tracker.step(tokens=64)
        runs.append((time.perf_counter() - started) / steps)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2002)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "tracker_overhead.md")
    args = parser.parse_args()
    cost = per_step_seconds(args.steps)
    text = (
        f"# The training callback's cost per step\n\n{date.today()}, {platform.machine()}, "
        f"Python {platform.python_version()}. `python benchmarks/tracker_overhead.py` makes this file.\n\n"
        f"| per step | share of a 20 ms step | share of a 1 s step |\n|---|---|---|\n"
        f"| {cost * 1e6:.1f} µs | {cost / 0.02 * 100:.3f} % | {cost * 100:.4f} % |\n"
    )
    args.out.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
