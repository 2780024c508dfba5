"""The analytic peak within 10 % of a simulated training step, for the catalog.

Every catalog model × {fp32, bf16, fp16} × checkpointing {off, on} × {AdamW, Adafactor}; the
micro-batch alternates between 1 and 4 over that grid so each model is checked at both sizes
(the full grid with both sizes for every row: benchmarks/analytic_vs_simulated.py and its results).
The models in :data:`SKIPPED` are skipped, each for the reason given there.
Then the fine-tuning methods (pure bf16 weights, LoRA) with the same target: every catalog model × each
method row at one rotating (checkpointing, micro-batch); the rows the benchmark recorded as misses
(benchmarks/results/analytic_vs_simulated_methods.md) are strict expected failures with the component that
misses, so a fix of the memory model shows up as an unexpected pass.

Sampled in the suite (issue 41: a row is a fake-tensor simulation, 1-60 s on 2 cores, and the three grids held
hundreds): :func:`_sample` keeps, of each grid's rows above, one row per class of step and every model family at
least once, the smallest model of a family first:

- precision grid: each (precision, checkpointing, optimizer) class, 12 of them, and each model family (the
  ``model_type``: gpt2, bert, llama, qwen2, gemma2, t5...) of the models that are not in :data:`SKIPPED`;
- methods grid: each (method row, checkpointing) class (full bf16 with AdamW and Adafactor, LoRA all-linear and
  attention over bf16, LoRA over fp32 with fp16; 10 classes) and each family of the small models it runs; the strict
  expected failures among them stay strict;
- QLoRA grid: each (targets, bitsandbytes before / since 0.43.2, checkpointing) class (8) and each small family.

``ADVISOR_FULL_GRID=1`` runs every row as before (``ADVISOR_FULL_GRID=1 pytest tests/measure/test_analytic_vs_simulated.py``),
and ``benchmarks/analytic_vs_simulated.py --grid precision|methods|qlora`` runs the whole grids with both
micro-batch sizes and every model, and records the results in benchmarks/results/.
"""

from __future__ import annotations

import os
from itertools import product

import pytest

pytestmark = pytest.mark.slow
pytest.importorskip("torch")
pytest.importorskip("transformers")

from benchmarks.analytic_vs_simulated import compare  # noqa: E402
from probes.model import catalog_ids, profile_model  # noqa: E402

#: every row of the grids below instead of a sample of them
FULL_GRID = os.environ.get("ADVISOR_FULL_GRID", "") not in ("", "0")


def _sample(cases: list, step_class, model_of=lambda values: values[0]) -> list:
    """``cases`` (pytest.param) less the sampled-out rows: unless :data:`FULL_GRID`, for each class of step
    (``step_class(values)``) the row of the smallest model of a family no chosen row has yet (else the smallest
    model's), then the smallest row of each family still missing. Rows skipped in ``cases`` are never chosen."""
    if FULL_GRID:
        return cases
    runnable = [c for c in cases if not any(m.name == "skip" for m in c.marks)]
    size = {m: profile_model(m).num_parameters for m in {model_of(c.values) for c in runnable}}
    family = {m: profile_model(m).model_type for m in size}
    ordered = sorted(runnable, key=lambda c: (size[model_of(c.values)], cases.index(c)))
    chosen: list = []
    for step in dict.fromkeys(step_class(c.values) for c in ordered):
        rows = [c for c in ordered if step_class(c.values) == step]
        seen = {family[model_of(c.values)] for c in chosen}
        chosen.append(next((c for c in rows if family[model_of(c.values)] not in seen), rows[0]))
    for name in dict.fromkeys(family[model_of(c.values)] for c in ordered):
        if name not in {family[model_of(c.values)] for c in chosen}:
            chosen.append(next(c for c in ordered if family[model_of(c.values)] == name))
    return [c for c in cases if c in chosen]


GRID = list(product(("fp32", "bf16", "fp16"), (False, True), ("adamw", "adafactor")))
_MOE = "a mixture of experts: fake tensors cannot run its data-dependent routing (simulate.py, known limitations)"
_SAME_LAYOUT = (
    "the Llama layout and coefficients the Llama-2-7B and Llama-3-8B rows check, at 20-25 s a row on "
    "2 cores; benchmarks/analytic_vs_simulated.py --models runs it"
)
#: catalog model → why the unit grid leaves it out
SKIPPED = {
    "mistralai/Mixtral-8x7B-v0.1": _MOE,
    "Qwen/Qwen1.5-MoE-A2.7B": _MOE,
    "deepseek-ai/DeepSeek-V2-Lite": _MOE,
    "Qwen/Qwen3-30B-A3B": _MOE,
    "meta-llama/Llama-3.1-8B": "the tensors and seq-len of meta-llama/Meta-Llama-3-8B (only RoPE scaling and max "
    "positions differ): the same rows",
    "meta-llama/Llama-3.1-70B": _SAME_LAYOUT,
    "huggyllama/llama-65b": _SAME_LAYOUT,
    "meta-llama/Llama-2-13b-hf": _SAME_LAYOUT,
    "meta-llama/Llama-2-70b-hf": _SAME_LAYOUT,
    **dict.fromkeys(
        ("Qwen/Qwen2.5-3B", "Qwen/Qwen2.5-14B", "Qwen/Qwen2.5-32B"),
        "the qwen2 layout and coefficients the Qwen2.5-7B rows check (tied embeddings: the gpt2 and "
        "Llama-3.2 rows), at 10-60 s a row on 2 cores; benchmarks/analytic_vs_simulated.py --models runs it",
    ),
    **dict.fromkeys(
        ("Qwen/Qwen3-4B", "Qwen/Qwen3-14B", "Qwen/Qwen3-32B"),
        "the qwen3 layout and coefficients the Qwen3-8B rows check (tied embeddings: the gpt2 and "
        "Llama-3.2 rows), at 10-60 s a row on 2 cores; benchmarks/analytic_vs_simulated.py --models runs it",
    ),
    "google/gemma-2-9b": "the gemma2 layout and coefficients the gemma-2-2b rows check, at 30 s a row on 2 cores; "
    "benchmarks/analytic_vs_simulated.py --models runs it",
}
CASES = [
    pytest.param(
        m,
        *g,
        1 if (i + j) % 2 else 4,
        marks=[pytest.mark.skip(reason=SKIPPED[m])] if m in SKIPPED else [],
        id=f"{m}-{g[0]}-{'ckpt' if g[1] else 'nockpt'}-{g[2]}-b{1 if (i + j) % 2 else 4}",
    )
    for i, m in enumerate(catalog_ids())
    for j, g in enumerate(GRID)
]


@pytest.mark.parametrize("model_id, precision, ckpt, optimizer, micro", _sample(CASES, lambda v: v[1:4]))
def test_analytic_peak_within_10_percent_of_simulated(model_id, precision, ckpt, optimizer, micro) -> None:
    analytic, simulated, _ = compare(model_id, precision, ckpt, optimizer, micro)
    assert abs(analytic / simulated - 1) <= 0.10, (
        f"analytic {analytic / 2**30:.2f} GiB vs simulated {simulated / 2**30:.2f} GiB"
    )


# -- the fine-tuning methods and pure 16-bit weights (issue 12), same target ----------------------------------

from benchmarks.analytic_vs_simulated import METHOD_GRID, ROOT, compare_method  # noqa: E402

_RECORDED = ROOT / "benchmarks" / "results" / "analytic_vs_simulated_methods.md"
#: Why each kind of recorded miss misses (the memory model's owner fixes them; the benchmark shows the figures):
_WHY = {
    "step-temporaries": "transformers' Adafactor upcasts each bf16 parameter and gradient to fp32 for its update: "
    "the optimizer step's temporaries are about 16 B per element of the largest matrix, priced "
    "at 4",
    "copies16": "autocast caches the 16-bit casts only of weights that require grad: over a frozen fp32 base under "
    "checkpointing no copies are held through the forward, and the estimate holds 2 B/param",
}
# The recorded misses of a third kind, activations over bf16 weights priced as under AMP's fp32 weights and frozen
# layers' inputs counted, are fixed (per-class calibration, advisor/engine/calibration.py:calibration_keys): those rows now
# run as plain tests, which must pass, until the results file is regenerated.


def _kind(weights: str, ckpt: bool, error: float) -> str | None:
    """Which component a recorded miss belongs to (the diagnosis in the results file); None: not understood."""
    if error < 0 and weights == "bf16":
        return "step-temporaries"
    if error > 0 and weights == "fp32" and ckpt:
        return "copies16"
    return None


def _recorded_errors() -> dict[tuple[str, ...], float]:
    """(model, method, weights, precision, checkpointing, optimizer, micro-batch) → the recorded error."""
    out = {}
    for line in _RECORDED.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) == 11 and cells[0] != "model" and not cells[0].startswith("---"):
            out[tuple(cells[:7])] = float(cells[9].rstrip("%")) / 100
    return out


#: the models whose method rows run as unit tests (seconds each); the benchmark runs every model
_SMALL = {
    "gpt2",
    "gpt2-medium",
    "distilbert-base-uncased",
    "bert-base-uncased",
    "roberta-base",
    "t5-small",
    "t5-base",
    "facebook/opt-125m",
    "bert-large-uncased",
}


def _method_cases() -> list:
    """Every catalog model × every method row, with checkpointing and micro-batch rotating over the models (the
    full grid: the benchmark); the rows the benchmark recorded beyond the target are strict expected failures."""
    recorded = _recorded_errors()
    benchmarked = {key[0] for key in recorded}
    rows = sorted({row[:5] for row in METHOD_GRID}, key=[row[:5] for row in METHOD_GRID].index)
    combos = [(False, 1), (True, 4), (False, 4), (True, 1)]
    cases = []
    for i, model_id in enumerate(catalog_ids()):
        for j, (method, weights, precision, targets, optimizer) in enumerate(rows):
            ckpt, micro = combos[(i + j) % len(combos)]
            what = method if targets is None else f"{method} r=16 {targets}"
            key = (model_id, what, weights, precision, "on" if ckpt else "off", optimizer, str(micro))
            marks = []
            if model_id in SKIPPED or model_id not in benchmarked or model_id not in _SMALL:
                marks = [
                    pytest.mark.skip(
                        reason=SKIPPED.get(
                            model_id,
                            "the method grid's unit rows run the models "
                            "under 500M parameters (CI time); the recorded run "
                            "of benchmarks/analytic_vs_simulated.py --grid "
                            "methods covers the rest",
                        )
                    )
                ]
            error = recorded.get(key, 0.0)
            kind = _kind(weights, ckpt, error)
            if not marks and abs(error) > 0.10 and kind is not None:  # an unexplained miss stays a failure
                marks = [pytest.mark.xfail(strict=True, reason=f"recorded {error:+.1%}: {_WHY[kind]}")]
            cases.append(
                pytest.param(
                    model_id,
                    method,
                    weights,
                    precision,
                    targets,
                    optimizer,
                    ckpt,
                    micro,
                    marks=marks,
                    id=f"{model_id}-{what.replace(' ', '-')}-{weights}-{precision}-"
                    f"{'ckpt' if ckpt else 'nockpt'}-{optimizer}-b{micro}",
                )
            )
    return cases


@pytest.mark.parametrize(
    "model_id, method, weights, precision, targets, optimizer, ckpt, micro",
    _sample(_method_cases(), lambda v: (*v[1:6], v[6])),
)
def test_methods_analytic_peak_within_10_percent_of_simulated(
    model_id, method, weights, precision, targets, optimizer, ckpt, micro
) -> None:
    pytest.importorskip("peft")
    analytic, simulated, _ = compare_method(model_id, method, weights, precision, targets, optimizer, ckpt, micro)
    assert abs(analytic / simulated - 1) <= 0.10, (
        f"analytic {analytic / 2**30:.2f} GiB vs simulated {simulated / 2**30:.2f} GiB"
    )


# -- QLoRA over bitsandbytes' 4-bit base (issue 13), same target ----------------------------------------------------

from benchmarks.analytic_vs_simulated import QLORA_GRID, compare_qlora  # noqa: E402


#: QLoRA rows the recorded grid (benchmarks/results/analytic_vs_simulated_qlora.md) has outside 10 %, and why
_QLORA_MISSES = {
    "t5-base": {
        ("attention", False, True): (
            "recorded -12.1 % (-9.8 % before the LoRA columns stopped absorbing the adapters' autocast copies, which "
            "masked it): T5's checkpointed QLoRA step keeps about 80 MB more than its LoRA step, not yet diagnosed"
        )
    }
}


def _qlora_cases() -> list:
    """Two rows of the QLoRA grid (targets × bitsandbytes before / since 0.43.2 × checkpointing) per small catalog
    model, rotating so that the models together cover every row (the whole catalog × every row:
    ``benchmarks/analytic_vs_simulated.py --grid qlora`` and its results)."""
    cases = []
    for i, model_id in enumerate(catalog_ids()):
        for targets, legacy, ckpt in (QLORA_GRID[i % len(QLORA_GRID)], QLORA_GRID[(i + 3) % len(QLORA_GRID)]):
            marks = (
                []
                if model_id in _SMALL
                else [
                    pytest.mark.skip(
                        reason="QLoRA unit rows run the models under 500M "
                        "parameters (CI time); the recorded grid "
                        "covers the rest"
                    )
                ]
            )
            if model_id in _QLORA_MISSES and (targets, legacy, ckpt) in _QLORA_MISSES[model_id]:
                marks.append(pytest.mark.xfail(strict=True, reason=_QLORA_MISSES[model_id][(targets, legacy, ckpt)]))
            cases.append(
                pytest.param(
                    model_id,
                    targets,
                    legacy,
                    ckpt,
                    marks=marks,
                    id=f"{model_id}-qlora-{targets}-{'legacy' if legacy else 'current'}-{'ckpt' if ckpt else 'nockpt'}",
                )
            )
    return cases


@pytest.mark.parametrize("model_id, targets, legacy, ckpt", _sample(_qlora_cases(), lambda v: v[1:4]))
def test_qlora_analytic_peak_within_10_percent_of_simulated(model_id, targets, legacy, ckpt) -> None:
    pytest.importorskip("peft")
    pytest.importorskip("bitsandbytes")
    analytic, simulated, _ = compare_qlora(model_id, targets, legacy, ckpt)
    assert abs(analytic / simulated - 1) <= 0.10, (
        f"analytic {analytic / 2**30:.2f} GiB vs simulated {simulated / 2**30:.2f} GiB"
    )
