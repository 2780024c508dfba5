"""Measured against predicted on this machine's device: `advisor validate` over a small grid, and
the matmul rates behind the CPU precision rule.

Usage: python benchmarks/validate_device.py [--steps N] [--quick] [--stack] [--edge] [--rows I,J] [--list]
                                             [--budget-s S] [--stack-first] [--out-dir DIR]
       python benchmarks/validate_device.py --render RECORDS.jsonl [...] [--out FILE]

Every grid row is one :func:`advisor.app.api.validate` (a ``ValidationReport``); each is appended, as it finishes,
to ``DIR/validate_<device>.jsonl`` (cpu, or the GPU's catalog id), and ``DIR/validate_<device>.md`` is rendered
again from those records, so a run stopped by a time limit keeps every row it finished. The table has one row per
trial: predicted and measured live-tensor peak (``max_memory_allocated``), device memory in use (NVML on CUDA),
the allocator's reserve (``max_memory_reserved``) and step time, and their errors. ``--render`` rebuilds the
markdown from records of several runs (e.g. the files of several calls to a lent GPU);
``benchmarks/refit_device.py`` fits advisor's device constants from the same records.

The grid: on a GPU, the issue's ``gpt2 --compare`` and ``bert-large-uncased --seq-len 512 --compare`` at their
default batch, and with ``--stack`` a Llama-3.1-8B LoRA / QLoRA plan at a fixed micro-batch crossed with the
stack settings (:data:`STACK_GRID`; rows whose package is missing are skipped); on the CPU, short sequences and
small batches (a gpt2 step at seq-len 1024 × 64 takes minutes). With ``--edge`` (GPU), :func:`edge_rows`: plans
pinned where the live tensors fill 95 % of the GPU, to measure the allocator's reserve on a full GPU. Padding-free packing is not in the grid: the
trials feed full-length synthetic samples, where packing changes neither the memory nor the step.

On a lent GPU machine, ``benchmarks/on_device.sh`` installs the carried wheels and runs this script with
``--out-dir "$OUT"`` (README, "Measuring on a GPU").
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import date
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from advisor.app import api  # noqa: E402
from advisor.app.options import MAX_TRIAL_SECONDS  # noqa: E402
from advisor.app.progress import Progress  # noqa: E402
from benchmarks.device_records import read_records, render, trial_rows  # noqa: E402
from advisor.core.errors import AdvisorError  # noqa: E402
from advisor.core.kernels import Attention, LossKernel  # noqa: E402
from advisor.core.vocabulary import Method  # noqa: E402

GIB = 2**30


class Row(NamedTuple):
    """One grid row: ``advisor validate`` of ``model`` with these workload options and plan settings."""

    model: str
    seq_len: int | None
    global_batch_size: int | None
    settings: dict[str, Any]
    compare: bool = False  #: also run the documents' fp32 baseline (GPU_GRID: the issue's --compare rows)

    def text(self) -> str:
        """The row in one line: model, workload and settings."""
        return f"{self.model} seq {self.seq_len} batch {self.global_batch_size} {self.settings}" + (
            " --compare" if self.compare else ""
        )


CPU_GRID = [
    Row("gpt2", 128, 8, {}),
    Row("gpt2", 128, 8, {"precision": "bf16"}),
    Row("gpt2", 256, 8, {"micro_batch_size": 4}),
    Row("distilbert-base-uncased", 128, 16, {}),
    Row("bert-base-uncased", 128, 8, {"gradient_checkpointing": True}),
    Row("t5-small", 128, 8, {}),
]
GPU_GRID = [Row("gpt2", None, None, {}, compare=True), Row("bert-large-uncased", 512, None, {}, compare=True)]
#: The stack crossed on a GPU (``--stack``): attention kernels, compile, Liger, checkpointing, activation offloading
#: and the QLoRA base, on Llama-3.1-8B's LoRA fine-tuning at a fixed plan so only the stack moves (Liger patches llama
#: models).
#: The loss kernel and compile are pinned: left unset, validate fills them with its recommendation (Liger and compile
#: where Liger is installed), and the first H100 run (2026-11-27) measured "eager" as eager + Liger + compile.
_FIXED = {
    "method": "lora",
    "micro_batch_size": 2,
    "gradient_accumulation_steps": 4,
    "precision": "bf16",
    "loss_kernel": "standard",
    "torch_compile": False,
}
STACK_GRID = [
    Row("meta-llama/Llama-3.1-8B", 2048, 8, {**_FIXED, **stack})
    for stack in (
        # eager keeps the s x s scores: 118 GiB predicted at micro-batch 2, so it runs 1 x 8 (67 GiB on an 80 GB H100)
        {"attention": "eager", "micro_batch_size": 1, "gradient_accumulation_steps": 8},
        {"attention": "sdpa"},
        {"attention": "flash-attention-2"},
        {"attention": "sdpa", "torch_compile": True},
        {"attention": "sdpa", "loss_kernel": "liger"},
        {"attention": "sdpa", "gradient_checkpointing": True},
        {"attention": "sdpa", "torch_compile": True, "gradient_checkpointing": True},
        {"attention": "sdpa", "method": "qlora"},
        {"attention": "sdpa", "method": "qlora", "gradient_checkpointing": True},
        {
            "attention": "sdpa",
            "gradient_checkpointing": True,
            "activation_offloading": True,
        },  # TRL's OffloadActivations
        {"attention": "sdpa", "loss_kernel": "liger-layers"},  # Liger's layers with the model's own loss
    )
]

#: The edge of the GPU (``--edge``): plans pinned at the largest micro-batch whose predicted live-tensor peak, CUDA
#: context and allocator slack stay within :data:`EDGE_SHARE` of the whole GPU. advisor's verdict (``memory.fits``:
#: ``device_bytes`` with the allocator's reserve, :mod:`advisor.engine.allocator`, within 90 %) calls them "does not
#: fit", yet published runs ran at 0.96-0.99 of the GPU by that measure (flash-attention's GPT-3 355M, torchtitan's
#: Llama 2 13B without checkpointing; ``benchmarks/published.py``): the caching allocator frees its unused cached
#: blocks and retries before it raises out-of-memory (``c10/cuda/CUDACachingAllocator.cpp``). Whether these rows
#: run, and their ``max_memory_reserved`` when they do, measure the reserve a full GPU needs (issue 13). On the first
#: H100 (``benchmarks/results/validate_h100-sxm.jsonl``) Llama-3.1-8B LoRA at micro-batch 3 ran with 66.7 GiB
#: reserved of 79.2, while gpt2 at 62 ran out of memory: its live tensors were 13.5 % over the prediction at 31.
EDGE_SHARE = 0.95
#: precision: the GPU's default (bf16 from Ampere)
EDGE_BASES = [
    Row("gpt2", 1024, None, {"torch_compile": False, "loss_kernel": "standard"}),
    Row(
        "meta-llama/Llama-3.1-8B",
        2048,
        None,
        {"method": "lora", "attention": "sdpa", "torch_compile": False, "loss_kernel": "standard"},
    ),
]
EDGE_MAX_MICRO_BATCH = 1024


def edge_rows(**where: Any) -> list[Row]:
    """:data:`EDGE_BASES` pinned at the edge of the GPU ``where`` names (``gpu=`` a catalog GPU or ``hardware=`` this
    machine's profile): each at the largest micro-batch (accumulation 1) whose predicted
    ``peak_bytes + cuda_context_bytes + ALLOCATOR_SLACK_BYTES`` is at most :data:`EDGE_SHARE` × the GPU's bytes
    (a binary search; the peak grows with the micro-batch). A base whose micro-batch 1 is already over, or that the
    rules refuse here (a line on stderr), is left out."""
    from advisor.engine.allocator import ALLOCATOR_SLACK_BYTES

    def live_share(row: Row, micro: int) -> float:
        est = api.estimate(
            row.model,
            seq_len=row.seq_len,
            global_batch_size=micro,
            **where,
            **row.settings,
            micro_batch_size=micro,
            gradient_accumulation_steps=1,
        )
        m = est.memory
        return (m.peak_bytes + m.components.cuda_context_bytes + ALLOCATOR_SLACK_BYTES) / m.capacity_bytes

    rows = []
    for base in EDGE_BASES:
        low, high = 0, EDGE_MAX_MICRO_BATCH + 1  # live_share(low) within the share (0: none yet), high over it
        try:
            while high - low > 1:
                mid = (low + high) // 2
                low, high = (mid, high) if live_share(base, mid) <= EDGE_SHARE else (low, mid)
        except AdvisorError as exc:  # the rules refuse the base on this GPU: skip it, run the rest
            print(f"edge row {base.model} left out: {str(exc).splitlines()[0]}", file=sys.stderr)
            continue
        if low:
            rows.append(
                base._replace(
                    global_batch_size=low,
                    settings={**base.settings, "micro_batch_size": low, "gradient_accumulation_steps": 1},
                )
            )
    return rows


def packages_needed(settings: dict[str, Any]) -> list[str]:
    """The optional packages (import names) a row's settings need: its attention kernel's, loss kernel's and
    method's (:mod:`advisor.core.kernels`, :mod:`advisor.core.vocabulary`), and TRL for activation offloading."""
    specs = (
        Attention.of(settings.get("attention", Attention.SDPA)).spec,
        LossKernel.of(settings.get("loss_kernel", LossKernel.STANDARD)).spec,
        Method.of(settings.get("method", Method.FULL)).spec,
    )
    return [s.package for s in specs if s.package] + (["trl"] if settings.get("activation_offloading") else [])


def grid(gpu: bool, stack: bool) -> list[Row]:
    """The rows of this device's grid: :data:`GPU_GRID` (plus :data:`STACK_GRID` with ``stack``) on a GPU, else
    :data:`CPU_GRID`. Every row keeps its index whatever is installed (``--list --gpu`` here numbers the rows as the
    lent machine does); :func:`missing` says which a machine skips."""
    return list(GPU_GRID) + (list(STACK_GRID) if stack else []) if gpu else list(CPU_GRID)


def missing(row: Row, installed: dict[str, str | None]) -> list[str]:
    """The packages (import names) ``row`` needs that are not ``installed``: the run skips the row."""
    return [p for p in packages_needed(row.settings) if not installed.get(p)]


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


def run_header(steps: int, argv: list[str]) -> dict[str, Any]:
    """The run's record: date, command, Python, CPU cores, the stack's package versions and the matmul rates."""
    import torch
    import transformers

    from probes.packages import installed_packages

    return {
        "kind": "run",
        "date": date.today().isoformat(),
        "command": " ".join(["benchmarks/validate_device.py", *argv]),
        "steps": steps,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "packages": {k: v for k, v in installed_packages().items() if v},
        "matmul_gflops": matmul_rates(),
    }


#: Seconds to build a row's model and start its trial, and what torch.compile adds to the warm-up (guesses for the
#: listing, not measurements).
BUILD_S, COMPILE_S = 15.0, 60.0


def print_grid(rows: list[Row], steps: int, installed: dict[str, str | None] | None = None, **where: Any) -> None:
    """Print each row with its plan (the recommendation, or the row's fixed plan when it sets the micro-batch) (``where``: ``gpu=`` a catalog GPU or ``hardware=``
    this machine's profile), its predicted device memory, and a rough wall time: :data:`BUILD_S` (and
    :data:`COMPILE_S` under compile) plus the warm-up
    and timed optimizer steps at the predicted step time, twice with the fp32 baseline (``--compare``); a correction
    or a larger-micro-batch trial adds as much again. The total helps split the grid over time-limited calls."""
    from advisor.measure.validation import DEFAULT_WARMUP

    total = 0.0
    for i, row in enumerate(rows):
        head = f"{i}: {row.text()}"
        if installed is not None and missing(row, installed):
            print(f"{head}: skipped here (needs {', '.join(missing(row, installed))})")
            continue
        price = api.estimate if "micro_batch_size" in row.settings else api.recommend  # a fixed plan, or advice
        try:
            rec = price(
                row.model, seq_len=row.seq_len, global_batch_size=row.global_batch_size, **where, **row.settings
            )
        except Exception as exc:  # noqa: BLE001 - a row that does not plan is listed with why
            print(f"{head}: no plan ({exc})")
            continue
        seconds = (
            BUILD_S + (COMPILE_S if rec.plan.torch_compile else 0.0) + (DEFAULT_WARMUP + steps) * rec.speed.step_time_s
        ) * (2 if row.compare else 1)
        total += seconds
        print(f"{head}: {rec.plan.describe()}; {rec.memory.device_bytes / GIB:.1f} GiB; about {seconds:.0f} s")
    print(f"about {total:.0f} s in all, before corrections and larger-micro-batch trials")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="the first two rows only")
    parser.add_argument(
        "--stack",
        action="store_true",
        help="GPU only: also cross the software stack (STACK_GRID; rows whose package is missing are skipped)",
    )
    parser.add_argument(
        "--edge",
        action="store_true",
        help="GPU only: also run EDGE_BASES at the edge of the GPU (edge_rows), after the other rows",
    )
    parser.add_argument("--rows", help="comma-separated row indices of the grid (--list shows them)")
    parser.add_argument(
        "--list",
        action="store_true",
        help="print the grid's rows, each with advisor's predicted memory and seconds, and exit",
    )
    parser.add_argument(
        "--gpu",
        help="with --list: list the GPU grid (--stack: its stack rows too, as if every "
        "package were installed) for this catalog GPU, e.g. h100-sxm",
    )
    parser.add_argument("--budget-s", type=float, help="start no row after this many seconds")
    parser.add_argument(
        "--stack-first",
        action="store_true",
        help="run the stack and edge rows before GPU_GRID's "
        "--compare rows (about 150 s each on an H100), so a short lease measures the stack first",
    )
    parser.add_argument(
        "--out-dir",
        default=str(ROOT / "benchmarks" / "results"),
        help="where the records and the markdown go (default benchmarks/results)",
    )
    parser.add_argument("--render", nargs="+", metavar="RECORDS", help="only render these records' markdown")
    parser.add_argument("--out", help="with --render: the markdown's path (default: stdout)")
    args = parser.parse_args(argv)
    if args.render:
        try:
            text = render(*read_records([Path(p) for p in args.render]))
        except (OSError, ValueError) as exc:
            sys.exit(f"validate_device: {exc}")
        if args.out:
            Path(args.out).write_text(text)
        else:
            sys.stdout.write(text)
        return
    if args.list and args.gpu:
        rows = grid(True, args.stack) + (edge_rows(gpu=args.gpu) if args.edge else [])
        print_grid(rows, args.steps, gpu=args.gpu)
        return
    import torch

    gpu = torch.cuda.is_available()
    hardware = api.probe_hardware()
    rows = grid(gpu, args.stack) + (edge_rows(hardware=hardware) if gpu and args.edge else [])
    chosen = [int(i) for i in args.rows.split(",")] if args.rows else list(range(2 if args.quick else len(rows)))
    if args.stack_first and gpu:
        chosen.sort(key=lambda i: i < len(GPU_GRID))  # stable: the stack and edge rows, then the --compare rows
    if args.list:
        print_grid(rows, args.steps, hardware.host.packages, hardware=hardware)
        return
    name = (hardware.gpu.catalog_id or "gpu") if gpu and hardware.gpu else "cpu"
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    records, markdown = out_dir / f"validate_{name}.jsonl", out_dir / f"validate_{name}.md"
    with records.open("a") as f:
        f.write(json.dumps(run_header(args.steps, argv)) + "\n")
    start = time.monotonic()
    for i in chosen:
        if args.budget_s is not None and time.monotonic() - start > args.budget_s:
            print(f"budget of {args.budget_s:.0f} s spent: rows from {i} not run", file=sys.stderr)
            break
        row = rows[i]
        if missing(row, hardware.host.packages):
            print(f"row {i} skipped: needs {', '.join(missing(row, hardware.host.packages))}", file=sys.stderr)
            continue
        with records.open("a") as f:  # a row the call's time limit stops shows in the markdown as begun
            f.write(json.dumps({"kind": "start", "row": i, "row_text": row.text()}) + "\n")
        print(f"row {i}: {row.text()}", file=sys.stderr)
        with Progress() as progress:  # each trial's plan and steps on stderr, as advisor validate prints them
            report = api.validate(
                row.model,
                seq_len=row.seq_len,
                global_batch_size=row.global_batch_size,
                steps=args.steps,
                compare=row.compare,
                progress=progress,
                max_seconds=MAX_TRIAL_SECONDS,
                **row.settings,
            )  # the call's own limit bounds it
        with records.open("a") as f:
            f.write(json.dumps({"kind": "row", "row": i, "report": report.model_dump(mode="json")}) + "\n")
        markdown.write_text(render(*read_records([records])))
        for line in trial_rows(report):
            print(line, file=sys.stderr)
    print(f"wrote {records} and {markdown}", file=sys.stderr)


if __name__ == "__main__":
    main()
