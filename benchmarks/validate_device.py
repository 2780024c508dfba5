"""Measured against predicted on this machine's device: `advisor validate` over a small grid, and
the matmul rates behind the CPU precision rule.

Usage: .venv/bin/python benchmarks/validate_device.py [--steps N] [--out FILE] [--quick] [--stack]
Writes benchmarks/results/validate_<device>.md (cpu, or the GPU's catalog id) with one row per
trial: predicted and measured peak memory and step time, and their errors. On a GPU the grid is
the issue's `gpt2 --compare` and `bert-large-uncased --seq-len 512 --compare` at their default
batch; on the CPU, short sequences and small batches (a gpt2 step at seq-len 1024 x 64 takes minutes).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from advisor.app import api  # noqa: E402
from probes.kernels import Attention, LossKernel  # noqa: E402

GIB = 2**30
CPU_GRID = [  # (model, seq_len, global batch, settings)
    ("gpt2", 128, 8, {}),
    ("gpt2", 128, 8, {"precision": "bf16"}),
    ("gpt2", 256, 8, {"micro_batch_size": 4}),
    ("distilbert-base-uncased", 128, 16, {}),
    ("bert-base-uncased", 128, 8, {"gradient_checkpointing": True}),
    ("t5-small", 128, 8, {}),
]
GPU_GRID = [("gpt2", None, None, {}), ("bert-large-uncased", 512, None, {})]
#: The stack crossed on a GPU (``--stack``): attention kernels, compile, Liger (where installed), on a small
#: decoder's LoRA fine-tuning at a fixed plan so only the stack moves; each row is one ``advisor validate`` with
#: those plan flags (Llama-3.1-8B: Liger patches llama models).
_FIXED = {"method": "lora", "micro_batch_size": 2, "gradient_accumulation_steps": 4, "precision": "bf16"}
STACK_GRID = [("meta-llama/Llama-3.1-8B", 2048, 8, {**_FIXED, **stack}) for stack in (
    {"attention": "eager"}, {"attention": "sdpa"}, {"attention": "flash-attention-2"},
    {"attention": "sdpa", "torch_compile": True}, {"attention": "sdpa", "loss_kernel": "liger"},
    {"attention": "sdpa", "gradient_checkpointing": True}, {"attention": "sdpa", "torch_compile": True,
                                                            "gradient_checkpointing": True})]


def matmul_rates() -> dict[str, float]:
    """GFLOP/s of a (1024 x 768) @ (768 x 3072) matmul (gpt2's MLP at 1024 tokens), per dtype."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    rates = {}
    for dtype in (torch.float32, torch.bfloat16):
        a = torch.randn(1024, 768, dtype=dtype, device=device)
        b = torch.randn(768, 3072, dtype=dtype, device=device)
        for _ in range(3):
            a @ b
        runs = []
        for _ in range(5):
            if device == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(20):
                a @ b
            if device == "cuda":
                torch.cuda.synchronize()
            runs.append((time.perf_counter() - t) / 20)
        rates[str(dtype).replace("torch.", "")] = 2 * 1024 * 768 * 3072 / statistics.median(runs) / 1e9
    return rates


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out")
    parser.add_argument("--quick", action="store_true", help="the first two rows only")
    parser.add_argument("--stack", action="store_true", help="GPU only: also cross the software stack (STACK_GRID; "
                                                             "rows whose package is missing are skipped)")
    args = parser.parse_args()
    import torch

    gpu = torch.cuda.is_available()
    grid = GPU_GRID if gpu else CPU_GRID
    if gpu and args.stack:
        installed = api.probe_hardware().host.packages
        needed = lambda s: [Attention.of(s.get("attention", Attention.SDPA)).spec.package,  # noqa: E731
                            LossKernel.of(s.get("loss_kernel", LossKernel.STANDARD)).spec.package]
        grid += [row for row in STACK_GRID if all(p is None or installed.get(p) for p in needed(row[3]))]
    if args.quick:
        grid = grid[:2]
    rows, reports = [], []
    for model, seq_len, gbs, settings in grid:
        report = api.validate(model, seq_len=seq_len, global_batch_size=gbs, steps=args.steps, compare=gpu,
                              **settings)
        reports.append(report)
        for t in report.trials:
            m = t.measured
            if m is None or m.step_time_s is None:
                rows.append(f"| {model} | {report.workload.seq_len} | {t.plan.describe()} | {t.role} | {t.status} "
                            f"| | | | | | | |")
                continue
            rows.append(
                f"| {model} | {report.workload.seq_len} | {t.plan.describe()} | {t.role} | {t.status} "
                f"| {t.predicted.memory.peak_bytes / GIB:.3f} | {m.peak_bytes / GIB:.3f} | {t.error.peak_bytes:+.1%} "
                f"| {t.predicted.speed.step_time_s:.3f} | {m.step_time_s:.3f} | {t.error.step_time_s:+.1%} "
                f"| {m.step_time_spread_s / m.step_time_s:.0%} | {m.mfu:.1%} |")
        print(rows[-1], file=sys.stderr)
    device = reports[0].device
    name = "cpu" if device.type == "cpu" else (api.probe_hardware().gpu.catalog_id or "gpu")
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / f"validate_{name}.md"
    rates = matmul_rates()
    mem_err = [abs(t.error.peak_bytes) for r in reports for t in r.trials if t.error and t.error.peak_bytes is not None]
    time_err = [abs(t.error.step_time_s) for r in reports for t in r.trials
                if t.error and t.error.step_time_s is not None]
    lines = [
        f"# advisor validate: measured against predicted on {device.name} ({device.type})",
        "",
        f"Date: {date.today().isoformat()}. torch {device.torch_version}"
        f"{', CUDA ' + device.cuda_version if device.cuda_version else ''}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPU cores. {args.steps} timed steps per trial after the warm-up. "
        f"Command: `.venv/bin/python benchmarks/validate_device.py --steps {args.steps}`.",
        "",
        "Peak memory is live tensors (CUDA: `max_memory_allocated`; CPU: one warm-up step counted as the "
        "simulator counts). Errors are predicted / measured − 1. Spread: (p90 − p10) / median of the step times.",
        "",
        "| model | seq-len | plan | trial | status | predicted peak GiB | measured GiB | error | predicted step s "
        "| measured s | error | spread | MFU |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Memory: median |error| {statistics.median(mem_err):.1%}, worst {max(mem_err):.1%} over {len(mem_err)} "
        "trials." if mem_err else "",
        f"Step time: median |error| {statistics.median(time_err):.1%}, worst {max(time_err):.1%}." if time_err else "",
        "",
        "## Matmul rates (the CPU precision rule)",
        "",
        "(1024 × 768) @ (768 × 3072), median of 5 × 20 runs: "
        + ", ".join(f"{k} {v:,.0f} GFLOP/s" for k, v in rates.items())
        + f" (bf16 / fp32 = {rates['bfloat16'] / rates['float32']:.2f}).",
        "",
    ]
    for r in reports:
        if r.comparison and r.comparison.speedup:
            lines.append(f"- {r.model} --compare: {r.comparison.speedup:.2f}x the baseline's speed, "
                         f"{r.comparison.memory_saved_bytes / GIB:.2f} GiB less peak memory; verdict {r.verdict}.")
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
