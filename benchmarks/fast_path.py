"""Cold wall time of the fast path against `python -c "import torch"` (target: well under half).

Usage: .venv/bin/python benchmarks/fast_path.py [--runs N] [--against DIR]
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
ENV = {
    **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
    "HF_HUB_OFFLINE": "1",
    "PYTHONPATH": str(ROOT),
}
COMMANDS = {
    'python -c "import torch"': [sys.executable, "-c", "import torch"],
    "advisor recommend --model gpt2 --json": [
        sys.executable,
        "-m",
        "advisor",
        "recommend",
        "--model",
        "gpt2",
        "--json",
    ],
    "advisor recommend --model gpt2 (rich report)": [sys.executable, "-m", "advisor", "recommend", "--model", "gpt2"],
    "advisor recommend --model meta-llama/Llama-2-7b-hf --gpu a100-80gb:8 --json": [
        sys.executable,
        "-m",
        "advisor",
        "recommend",
        "--model",
        "meta-llama/Llama-2-7b-hf",
        "--gpu",
        "a100-80gb:8",
        "--json",
    ],
    "advisor recommend --model mistralai/Mixtral-8x7B-v0.1 --gpu h100-sxm:8 --json": [
        sys.executable,
        "-m",
        "advisor",
        "recommend",
        "--model",
        "mistralai/Mixtral-8x7B-v0.1",
        "--gpu",
        "h100-sxm:8",
        "--json",
    ],
    "advisor estimate --model gpt2 --gpu t4 --json": [
        sys.executable,
        "-m",
        "advisor",
        "estimate",
        "--model",
        "gpt2",
        "--gpu",
        "t4",
        "--json",
    ],
}


def wall(cmd: list[str], root: Path = ROOT) -> float:
    """Seconds of one run of ``cmd`` in a fresh interpreter, with ``root``'s advisor on the path."""
    start = time.perf_counter()
    subprocess.run(
        cmd,
        env={**ENV, "PYTHONPATH": str(root)},
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument(
        "--against",
        type=Path,
        metavar="DIR",
        help="another checkout (e.g. `git worktree add /tmp/before REV`): its runs alternate with "
        "this tree's, so both see the same machine load, and the table gets its column",
    )
    args = parser.parse_args()
    roots = [ROOT] + ([args.against.resolve()] if args.against else [])
    rows = []
    for name, cmd in COMMANDS.items():
        for root in roots:
            wall(cmd, root)  # warm the OS file cache: "cold" means a fresh interpreter, not a cold disk
        times: dict[Path, list[float]] = {root: [] for root in roots}
        for _ in range(args.runs):
            for root in roots:
                times[root].append(wall(cmd, root))
        rows.append((name, [statistics.median(times[r]) for r in roots], min(times[ROOT]), max(times[ROOT])))
    torch_s = rows[0][1][0]
    against = f" | median s, {args.against.name}" if args.against else ""
    lines = [
        f"# Fast path: cold wall time ({date.today()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, {args.runs} runs, median; bytecode "
        "cached as in a user's interpreter)",
        "",
        f"| command | median s | min s | max s | vs import torch{against} |",
        "|---|---:|---:|---:|---:|" + ("---:|" if args.against else ""),
    ]
    for name, medians, lo, hi in rows:
        other = f" | {medians[1]:.3f}" if args.against else ""
        lines.append(f"| `{name}` | {medians[0]:.3f} | {lo:.3f} | {hi:.3f} | {medians[0] / torch_s:.0%}{other} |")
    text = "\n".join(lines) + "\n"
    (ROOT / "benchmarks" / "results" / "fast_path.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
