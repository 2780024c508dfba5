"""Calibrate the elementwise memory traffic of a training step against steps counted op by op on fake tensors.

For each family of ``benchmarks/calibrate_activations.py`` and each class of step of :data:`TRAFFIC_VARIANTS` (its
default task), one micro-batch of the
family's transformers model at its real width, 1-3 layers, runs under ``benchmarks/eager_traffic.py``'s counting
mode (the bytes each non-matmul aten op reads and writes). The forward's and the backward's traffic are fitted apart
by least squares to the shapes of :func:`advisor.engine.traffic.traffic_features`:

    T = L·(a·sbh + b·sbf + c·p + d·bnss) + e·sbh + g·sbv + k·v·h + m·nss   (bytes; p = a block's matmul weights)

over :data:`DESIGN`, with SDPA attention; eager attention's extra traffic is fitted per b·heads·s² score element and
block from the difference of eager and SDPA steps at :data:`EAGER_SHAPES`. The families Liger-Kernel patches get a
second pair of phases counted with its kernels' stand-ins (``benchmarks/liger_standins.py``). ``_meta.fallback_ratio``
is the median, over the columns, of the counted traffic at the family's reference model (2 × 1024 tokens) over the
former price (the saved activations × 3), the multiplier for families without columns. Each column is checked at the reference model's
full depth, with and without checkpointing (:func:`reference_check`). Writes ``advisor/data/traffic.json``; about
10 minutes on 2 cores.

Usage: HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/calibrate_traffic.py [--out FILE] [FAMILY ...]
"""

from __future__ import annotations

import contextlib
import json
import platform
import statistics
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.engine.calibration import calibration_keys  # noqa: E402
from advisor.engine.memory import activation_traffic_bytes  # noqa: E402
from advisor.engine.traffic import FEATURES, block_layers, traffic_features  # noqa: E402
from benchmarks.calibrate_activations import FAMILIES, LORA_VARIANTS, VARIANTS, _plan, design_config  # noqa: E402
from benchmarks.eager_traffic import counted_traffic  # noqa: E402
from benchmarks.liger_standins import LIGER_FAMILIES, liger_standins  # noqa: E402
from advisor.core.errors import UsageError  # noqa: E402
from advisor.core.kernels import Attention  # noqa: E402
from probes.model import load_config, profile_from_config  # noqa: E402
from advisor.core.vocabulary import WeightsDtype  # noqa: E402

#: (layers, FFN multiple of the model's, extra vocabulary rows, micro-batch, seq-len): 14 rows for 8 features per
#: phase (the design ``benchmarks/eager_traffic.py --fit`` checked: fitted at 1-3 layers, it priced Llama-3.1-8B's
#: 32 layers within 0.3-0.9 %)
DESIGN = [
    (1, 1, 0, 2, 256),
    (2, 1, 0, 2, 256),
    (3, 1, 0, 2, 256),
    (2, 2, 0, 2, 256),
    (2, 1, 4096, 2, 256),
    (2, 1, 0, 4, 256),
    (2, 1, 0, 2, 512),
    (3, 2, 4096, 1, 512),
    (1, 1, 0, 1, 128),
    (3, 1, 0, 4, 512),
    (1, 2, 0, 4, 128),
    (3, 1, 4096, 2, 128),
    (2, 2, 0, 1, 1024),
    (1, 1, 4096, 4, 1024),
]
#: The classes of step fitted: the activation columns' (the QLoRA columns of bitsandbytes < 0.43.2 run the same ops
#: as the current ones) and LoRA / QLoRA over fp32 weights under autocast (PEFT's default when the model loads without
#: a torch_dtype, and advisor's fp16 plans on GPUs without bf16), which the memory model prices with full
#: fine-tuning's mixed column but whose traffic differs (the frozen weights are cast, the adapters' inputs too)
TRAFFIC_VARIANTS = (
    VARIANTS
    + [v for v in LORA_VARIANTS if len(v) == 4 or not v[4]]
    + [(v[0], WeightsDtype.FP32.value, *v[2:4]) for v in LORA_VARIANTS if len(v) == 4 or not v[4]]
)
#: (layers, micro-batch, seq-len) of the eager-minus-SDPA differences
EAGER_SHAPES = [(1, 2, 256), (2, 1, 512), (2, 2, 128)]


def _counted(family: str, variant: tuple, design: tuple, attention: str | None = None, liger: bool = False):
    """(profile, forward bytes, backward bytes, seq-len run) of one design row; ``liger``: with Liger's kernels'
    stand-ins (:mod:`benchmarks.liger_standins`)."""
    model_id, layer_keys, ffn_key, default_ffn = FAMILIES[family]
    layers, ffn_mult, extra_vocabulary, b, seq = design
    raw = design_config(model_id, layer_keys, ffn_key, default_ffn, layers, ffn_mult, extra_vocabulary)
    prof = profile_from_config(raw, model_id)
    seq = min(seq, prof.max_position_embeddings or seq)  # BERT's 512 positions: the longest rows are cut there
    plan = _plan(variant, False, b)
    if attention:
        plan = plan.model_copy(update={"attention": attention})
    with liger_standins(family) if liger else contextlib.nullcontext():
        mode = counted_traffic(prof, plan, seq, raw)
    return prof, mode.forward_traffic, mode.traffic - mode.forward_traffic, seq


def _fit_phases(family: str, variant: tuple, liger: bool = False) -> tuple[dict, dict]:
    """(``forward`` and ``backward`` coefficients, each phase's worst relative residual) over :data:`DESIGN`."""
    rows = []
    for design in DESIGN:
        prof, forward, backward, seq = _counted(family, variant, design, liger=liger)
        rows.append((traffic_features(prof, design[3], seq), forward, backward))
    a = np.array([r[0] for r in rows], dtype=float)
    coef, worst = {}, {}
    for phase, column in (("forward", 1), ("backward", 2)):
        y = np.array([r[column] for r in rows], dtype=float)
        fitted, *_ = np.linalg.lstsq(a, y, rcond=None)
        coef[phase] = [float(v) for v in fitted]
        worst[phase] = float(np.max(np.abs(a @ fitted - y) / np.maximum(y, 1)))
    return coef, worst


def calibrate(family: str, variant: tuple) -> dict:
    """One column's coefficients: ``forward`` and ``backward`` (bytes per element of each of
    :data:`FEATURES`), ``eager_forward`` / ``eager_backward`` (bytes per score element and block), the fits' worst
    relative residuals, and for :data:`LIGER_FAMILIES` the same two phases under Liger's layers (``liger``: counted
    with their stand-ins and the model's own loss; the engine prices the fused linear cross-entropy apart)."""
    coef, worst = _fit_phases(family, variant)
    eager = {"eager_forward": [], "eager_backward": []}
    for layers, b, seq in EAGER_SHAPES:
        design = (layers, 1, 0, b, seq)
        prof, f_sdpa, b_sdpa, seq = _counted(family, variant, design)
        _, f_eager, b_eager, _ = _counted(family, variant, design, Attention.EAGER.value)
        scores = block_layers(prof) * b * prof.num_attention_heads * seq * seq
        eager["eager_forward"].append((f_eager - f_sdpa) / scores)
        eager["eager_backward"].append((b_eager - b_sdpa) / scores)
    # (a family that runs eager attention whatever the config asks, T5, differs by noise only: none)
    coef.update({k: max(statistics.median(v), 0.0) for k, v in eager.items()})
    if family in LIGER_FAMILIES:
        liger, liger_worst = _fit_phases(family, variant, liger=True)
        coef["liger"] = liger
        worst.update({f"liger_{phase}": w for phase, w in liger_worst.items()})
    coef["fit_worst_relative_residual"] = worst
    return coef


def reference_check(family: str, variant: tuple, coef: dict) -> dict:
    """The column at the family's reference model, its full depth, 2 × 1024 tokens (BERT's: 512), counted against
    the fit: ``depth_error`` (fitted / counted − 1, eager step), ``checkpointed_error`` (the same under full
    checkpointing, the forward's per-block terms added once more), and ``former_ratio``, the counted eager step over
    the former price (the saved activations × 3)."""
    from advisor.engine.traffic import LAYER_FEATURES

    model_id = FAMILIES[family][0]
    raw = load_config(model_id)[0]
    prof = profile_from_config(raw, model_id)
    seq = min(1024, prof.max_position_embeddings or 1024)
    x = traffic_features(prof, 2, seq)
    fitted = sum(c * v for c, v in zip(coef["forward"] + coef["backward"], x + x))
    layer_forward = sum(c * v for c, v in zip(coef["forward"][:LAYER_FEATURES], x))
    counted = counted_traffic(prof, _plan(variant, False, 2), seq, raw).traffic
    checkpointed = counted_traffic(prof, _plan(variant, True, 2), seq, raw).traffic
    return {
        "depth_error": fitted / counted - 1,
        "checkpointed_error": (fitted + layer_forward) / checkpointed - 1,
        "former_ratio": counted / (3 * activation_traffic_bytes(prof, _plan(variant, False, 2), seq)),
    }


def main() -> None:
    import torch
    import transformers

    start = time.perf_counter()
    args = sys.argv[1:]
    out = ROOT / "advisor" / "data" / "traffic.json"
    if args[:1] == ["--out"]:
        out, args = Path(args[1]), args[2:]
    chosen = args or list(FAMILIES)
    unknown = sorted(set(chosen) - set(FAMILIES))
    if unknown:
        sys.exit(f"calibrate_traffic.py: unknown families {unknown}; known: {sorted(FAMILIES)}")
    table: dict = json.loads(out.read_text()) if out.exists() else {}
    table["_meta"] = {
        "date": str(date.today()),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "features": list(FEATURES),
        "method": __doc__.split("\n\n")[1].replace("\n", " "),
    }
    for family in chosen:
        table[family] = {}
        for variant in TRAFFIC_VARIANTS:
            key = calibration_keys(_plan(variant, False, 1))[0]
            try:
                coef = calibrate(family, variant)
            except (UsageError, ValueError) as exc:  # as calibrate_activations.py skips them
                print(f"{family:10s} {key}: skipped ({exc})", flush=True)
                continue
            coef["reference"] = reference_check(family, variant, coef)
            table[family][key] = coef
            print(
                f"{family:10s} {key:28s} forward {['%.1f' % c for c in coef['forward']]} backward "
                f"{['%.1f' % c for c in coef['backward']]} eager {coef['eager_forward']:.1f}/"
                f"{coef['eager_backward']:.1f} reference {coef['reference']} "
                f"residuals {coef['fit_worst_relative_residual']}",
                flush=True,
            )
        out.write_text(json.dumps(table, indent=1) + "\n")  # after each family: a long run keeps what it made
    ratios = [c["reference"]["former_ratio"] for f, cols in table.items() if f != "_meta" for c in cols.values()]
    table["_meta"]["fallback_ratio"] = statistics.median(ratios)
    out.write_text(json.dumps(table, indent=1) + "\n")
    print(
        f"fallback ratio {table['_meta']['fallback_ratio']:.2f} over {len(ratios)} columns; wrote {out} in "
        f"{time.perf_counter() - start:.0f} s"
    )


if __name__ == "__main__":
    main()
