"""The analytic peak against the simulated peak for the whole catalog.

Grid (``--grid precision``, issue 3): every catalog model (its default task) × {fp32, bf16, fp16} × activation
checkpointing {off, on} × {AdamW, Adafactor} × micro-batch {1, 4}, seq-len min(512, max positions), one CUDA
device. Writes benchmarks/results/analytic_vs_simulated.md.

Grid (``--grid methods``, issue 12): the same models, seq-len and device with the fine-tuning methods and pure
16-bit weights: full fine-tuning with bf16 weights (no fp32 masters) under bf16 × {AdamW, Adafactor}; LoRA
rank 16 over bf16 weights under bf16 × targets {all-linear, attention}; LoRA over fp32 weights under fp16
(autocast's 16-bit copies; what the planner does on GPUs without bf16), all-linear; each × checkpointing
{off, on} × micro-batch {1, 4}. Writes benchmarks/results/analytic_vs_simulated_methods.md.

Grid (``--grid qlora``, issue 13): QLoRA rank 16 over bitsandbytes' 4-bit base (bf16 weights, bf16, AdamW) ×
targets {attention, all-linear} × bitsandbytes {0.43.2 and later, older: ``legacy_bitsandbytes``} ×
checkpointing {off, on}, micro-batch 2. Writes benchmarks/results/analytic_vs_simulated_qlora.md.

Grid (``--grid step-in-backward``, issue 12): the optimizer step fused into backward (one AdamW per parameter,
stepped by its post-accumulate-grad hook) under bf16 over fp32 or bf16 weights × checkpointing {off, on} ×
micro-batch {1, 4}. Writes benchmarks/results/analytic_vs_simulated_step_in_backward.md.

Target (issue 3, the same for every grid): every row within 10 %.

Usage: HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/analytic_vs_simulated.py [--grid precision|methods|qlora]
       [--models gpt2 t5-small ...] [--update] [--reprice]   (--grid step-in-backward too)

``--reprice`` prices every row of the existing results file again with the current analytic model against the
simulated peak the file records (to 0.01 GiB), without simulating: for a change to the memory model alone (the
simulation's code and versions unchanged); the header says so.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
import types
from datetime import date
from itertools import product
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.engine.memory import estimate_memory  # noqa: E402
from advisor.measure.simulate import simulate  # noqa: E402
from advisor.core.kernels import Attention  # noqa: E402
from probes.model import catalog_ids, profile_model  # noqa: E402
from advisor.core.vocabulary import LoraTargets, Method, Optimizer, Precision, WeightsDtype  # noqa: E402
from rules import Plan  # noqa: E402

GIB = 1024**3
GRID = list(product(("fp32", "bf16", "fp16"), (False, True), ("adamw", "adafactor"), (1, 4)))
_BF16, _FP16 = Precision.BF16.value, Precision.FP16.value
#: (method, weights dtype, precision, LoRA targets, optimizer) of the methods grid, each × checkpointing × micro-batch
_METHOD_ROWS = [
    (Method.FULL.value, WeightsDtype.BF16.value, _BF16, None, Optimizer.ADAMW.value),
    (Method.FULL.value, WeightsDtype.BF16.value, _BF16, None, Optimizer.ADAFACTOR.value),
    (Method.LORA.value, WeightsDtype.BF16.value, _BF16, LoraTargets.ALL_LINEAR.value, Optimizer.ADAMW.value),
    (Method.LORA.value, WeightsDtype.BF16.value, _BF16, LoraTargets.ATTENTION.value, Optimizer.ADAMW.value),
    (Method.LORA.value, WeightsDtype.FP32.value, _FP16, LoraTargets.ALL_LINEAR.value, Optimizer.ADAMW.value),
]
METHOD_GRID = [(*row, ckpt, micro) for row in _METHOD_ROWS for ckpt in (False, True) for micro in (1, 4)]
LORA_RANK = 16  #: the planner's default rank (advisor.core.plan.DEFAULT_LORA_RANK)


def seq_len_for(profile) -> int:
    return min(512, profile.max_position_embeddings or 512)


def plan_for(precision: str, ckpt: bool, optimizer: str, micro: int, **settings) -> Plan:
    """A one-GPU plan; ``settings``: other Plan fields (method, weights_dtype, lora_rank, lora_targets)."""
    return Plan(
        device="cuda",
        precision=precision,
        tf32=False,
        optimizer=optimizer,
        gradient_checkpointing=ckpt,
        micro_batch_size=micro,
        gradient_accumulation_steps=1,
        parallelism="none",
        num_gpus=1,
        **settings,
    )


def compare(
    model_id: str, precision: str, ckpt: bool, optimizer: str, micro: int, **settings
) -> tuple[int, int, float]:
    """(analytic peak, simulated peak, seconds) in bytes; ``settings`` as :func:`plan_for`."""
    profile = profile_model(model_id)
    if Attention.SDPA not in profile.attention_kernels:  # transformers' code for the type runs eager only (Gemma 2)
        settings.setdefault("attention", Attention.EAGER.value)
    plan = plan_for(precision, ckpt, optimizer, micro, **settings)
    seq = seq_len_for(profile)
    sim = simulate(profile, plan, seq)
    analytic = estimate_memory(profile, plan, seq, 200 * GIB).peak_bytes
    return analytic, sim.peak_bytes, sim.wall_s


def compare_method(
    model_id: str,
    method: str,
    weights: str,
    precision: str,
    targets: str | None,
    optimizer: str,
    ckpt: bool,
    micro: int,
) -> tuple[int, int, float]:
    """:func:`compare` for a row of :data:`METHOD_GRID`."""
    settings = dict(method=method, weights_dtype=weights)
    if targets is not None:
        settings.update(lora_rank=LORA_RANK, lora_targets=targets)
    return compare(model_id, precision, ckpt, optimizer, micro, **settings)


def _precision_rows(model_id: str) -> list[tuple[list[str], int, int, float]]:
    """(key cells, analytic bytes, simulated bytes, seconds) of every row of :data:`GRID` for one model."""
    rows = []
    for precision, ckpt, optimizer, micro in GRID:
        analytic, simulated, wall = compare(model_id, precision, ckpt, optimizer, micro)
        rows.append(([model_id, precision, "on" if ckpt else "off", optimizer, str(micro)], analytic, simulated, wall))
    return rows


def _method_rows(model_id: str) -> list[tuple[list[str], int, int, float]]:
    """(key cells, analytic bytes, simulated bytes, seconds) of every row of :data:`METHOD_GRID` for one model."""
    rows = []
    for method, weights, precision, targets, optimizer, ckpt, micro in METHOD_GRID:
        analytic, simulated, wall = compare_method(
            model_id, method, weights, precision, targets, optimizer, ckpt, micro
        )
        what = method if targets is None else f"{method} r={LORA_RANK} {targets}"
        rows.append(
            (
                [model_id, what, weights, precision, "on" if ckpt else "off", optimizer, str(micro)],
                analytic,
                simulated,
                wall,
            )
        )
    return rows


#: (weights dtype, checkpointing, micro-batch) of the step-in-backward grid, under bf16 with AdamW
BACKWARD_GRID = [
    (w, ckpt, micro)
    for w in (WeightsDtype.FP32.value, WeightsDtype.BF16.value)
    for ckpt in (False, True)
    for micro in (1, 4)
]


def _backward_rows(model_id: str) -> list[tuple[list[str], int, int, float]]:
    """(key cells, analytic bytes, simulated bytes, seconds) of every row of :data:`BACKWARD_GRID` for one model."""
    rows = []
    for weights, ckpt, micro in BACKWARD_GRID:
        analytic, simulated, wall = compare(
            model_id, _BF16, ckpt, Optimizer.ADAMW.value, micro, weights_dtype=weights, optimizer_in_backward=True
        )
        rows.append(([model_id, weights, "on" if ckpt else "off", str(micro)], analytic, simulated, wall))
    return rows


#: (LoRA targets, bitsandbytes before 0.43.2, checkpointing) of the QLoRA grid, at micro-batch 2. q and v adapters
#: (``q-v``) are left out: over a 4-bit base they keep what q, k, v, o adapters keep (their calibrated columns agree,
#: ``tests/engine/test_activation_classes.py``), and GPT-2's fused c_attn cannot take them
QLORA_GRID = [
    (t.value, legacy, ckpt)
    for t in (LoraTargets.ALL_LINEAR, LoraTargets.ATTENTION)
    for legacy in (False, True)
    for ckpt in (False, True)
]


def compare_qlora(model_id: str, targets: str, legacy: bool, ckpt: bool, micro: int = 2) -> tuple[int, int, float]:
    """:func:`compare` for a row of :data:`QLORA_GRID`."""
    return compare(
        model_id,
        _BF16,
        ckpt,
        Optimizer.ADAMW.value,
        micro,
        method=Method.QLORA.value,
        weights_dtype=WeightsDtype.BF16.value,
        lora_rank=LORA_RANK,
        lora_targets=targets,
        legacy_bitsandbytes=legacy,
    )


def _qlora_rows(model_id: str) -> list[tuple[list[str], int, int, float]]:
    """(key cells, analytic bytes, simulated bytes, seconds) of every row of :data:`QLORA_GRID` for one model."""
    rows = []
    for targets, legacy, ckpt in QLORA_GRID:
        analytic, simulated, wall = compare_qlora(model_id, targets, legacy, ckpt)
        rows.append(
            (
                [model_id, targets, "< 0.43.2" if legacy else ">= 0.43.2", "on" if ckpt else "off"],
                analytic,
                simulated,
                wall,
            )
        )
    return rows


GRIDS = {  # name -> (results file, row maker, key columns)
    "precision": (
        "analytic_vs_simulated.md",
        _precision_rows,
        "| model | precision | checkpointing | optimizer | micro-batch |",
    ),
    "methods": (
        "analytic_vs_simulated_methods.md",
        _method_rows,
        "| model | method | weights | precision | checkpointing | optimizer | micro-batch |",
    ),
    "step-in-backward": (
        "analytic_vs_simulated_step_in_backward.md",
        _backward_rows,
        "| model | weights | checkpointing | micro-batch |",
    ),
    "qlora": ("analytic_vs_simulated_qlora.md", _qlora_rows, "| model | LoRA targets | bitsandbytes | checkpointing |"),
}


def _versions() -> str:
    """The machine and the versions the simulated steps ran with (fake tensors: the CPU's speed sets only the
    seconds column)."""
    from importlib.metadata import version
    from importlib.util import find_spec

    import peft
    import torch
    import transformers

    from probes.hardware import read_host

    host = read_host()
    return (
        f"{host.cpu_model or platform.machine()}, {host.cpu_cores} cores; Python {platform.python_version()}, "
        f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}"
        + (f", bitsandbytes {version('bitsandbytes')}" if find_spec("bitsandbytes") else "")
    )


def _split_notes(text: str) -> tuple[str, str]:
    """(the generated part, the hand-written notes from the first '## Where' heading on, kept across reruns)."""
    at = text.find("\n## Where")
    return (text, "") if at < 0 else (text[:at], text[at:])


def _summary(rows: list[str], keys: int) -> list[str]:
    """The methods grid's errors by plan kind (every key column but the model and the micro-batch)."""
    groups: dict[tuple[str, ...], list[float]] = {}
    for line in rows:
        cells = [c.strip() for c in line.split("|")[1:-1]]
        groups.setdefault(tuple(cells[1 : keys - 1]), []).append(float(cells[keys + 2].rstrip("%")))
    out = [
        "",
        "## Summary by plan kind (error = analytic / simulated − 1, %)",
        "",
        "| method | weights | precision | checkpointing | optimizer | rows | median | range | within 10 % |",
        "|---|---|---|---|---|---:|---:|---:|---:|",
    ]
    for group, errors in groups.items():
        within = sum(abs(e) <= 10 for e in errors)
        out.append(
            f"| {' | '.join(group)} | {len(errors)} | {statistics.median(errors):+.1f} | "
            f"{min(errors):+.1f} … {max(errors):+.1f} | {within}/{len(errors)} |"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--grid", choices=list(GRIDS), default="precision")
    parser.add_argument("--models", nargs="*", default=[m for m in catalog_ids() if not profile_model(m).num_experts])
    # mixtures of experts cannot be simulated (advisor/measure/simulate.py, known limitations)
    parser.add_argument(
        "--update", action="store_true", help="keep the rows of other models from the existing results file"
    )
    parser.add_argument(
        "--reprice",
        action="store_true",
        help="price the existing file's rows again against its recorded simulated peaks",
    )
    args = parser.parse_args()
    name, make_rows, key = GRIDS[args.grid]
    out = ROOT / "benchmarks" / "results" / name
    error_column = key.count("|") + 2  # after the key columns: simulated, analytic, error
    kept: list[str] = []
    table, notes = _split_notes(out.read_text()) if out.exists() else ("", "")
    if args.update:
        kept = [
            line
            for line in table.splitlines()
            if line.startswith("| ")
            and not line.startswith("| model")
            and line.count("|") == key.count("|") + 4  # a result row (the summary's rows have fewer cells)
            and line.split("|")[1].strip() not in args.models
        ]
    rows, errors, start = list(kept), [], time.perf_counter()
    errors = [abs(float(line.split("|")[error_column].strip().rstrip("%")) / 100) for line in kept]
    for model_id in args.models:
        for cells, analytic, simulated, wall in (
            _repriced(make_rows, model_id, table, key) if args.reprice else make_rows(model_id)
        ):
            err = analytic / simulated - 1
            errors.append(abs(err))
            rows.append(
                f"| {' | '.join(cells)} | {simulated / GIB:.2f} | {analytic / GIB:.2f} | {err:+.1%} | {wall:.1f} |"
            )
            print(rows[-1], flush=True)
    within = sum(e <= 0.10 for e in errors)
    head = [
        f"# Analytic vs simulated peak ({date.today()}; {len(rows)} rows; "
        f"{time.perf_counter() - start:.0f} s{' for the rows rerun' if kept else ''}"
        f"{'; analytic repriced against the simulated peaks recorded before' if args.reprice else ''})",
        "",
        f"Median |error| {statistics.median(errors):.2%}, worst {max(errors):.2%}; {within} of {len(errors)} rows "
        "within the target (every row within 10 %).",
        "Simulated: one real transformers training step, twice, on fake tensors (advisor/measure/simulate.py); "
        f"{_versions()}.",
        "",
        key + " simulated GiB | analytic GiB | error | sim s |",
        "|---" * (key.count("|") - 1) + "|---:|---:|---:|---:|",
    ]
    rows.sort(key=lambda line: line.split("|")[1].strip())
    summary = _summary(rows, key.count("|") - 1) if args.grid == "methods" else []
    out.write_text("\n".join(head + rows + summary) + "\n" + notes)
    print(f"median {statistics.median(errors):.2%} worst {max(errors):.2%}; wrote {out}")


def _repriced(make_rows, model_id: str, table: str, key: str):
    """``make_rows(model_id)`` with the simulation replaced by the peaks (and seconds) ``table`` recorded for the
    same key cells: the current analytic model against the earlier simulated steps (``--reprice``); nothing for a
    model the table has no row of."""
    width = key.count("|") - 1
    recorded = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if line.startswith("| ") and len(cells) == width + 4 and cells[0] != "model":
            recorded[tuple(cells[:width])] = (int(float(cells[width]) * GIB), float(cells[width + 3]))
    if not any(cells[0] == model_id for cells in recorded):
        return  # a model the file leaves out (its notes say why)
    stub = types.SimpleNamespace(peak_bytes=1, wall_s=0.0)
    with mock.patch(f"{__name__}.simulate", lambda *args, **kwargs: stub):
        rows = make_rows(model_id)
    for cells, analytic, _, _ in rows:
        if tuple(cells) not in recorded:
            raise SystemExit(f"analytic_vs_simulated.py: no recorded row {cells}: simulate it (drop --reprice)")
        simulated, wall = recorded[tuple(cells)]
        yield cells, analytic, simulated, wall


if __name__ == "__main__":
    main()
