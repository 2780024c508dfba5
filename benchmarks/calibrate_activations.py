"""Calibrate the analytic activation model against simulated training steps (fake tensors).

For each catalog family and precision class (fp32; 16-bit mixed precision), simulate one step of
the family's real transformers model at 1-2 layers of its real width, varying layers, FFN size,
vocabulary, micro-batch and sequence length, and fit by least squares the bytes held at the end
of the forward pass (sbh = seq·batch·hidden elements, sbf = seq·batch·FFN, sbv = seq·batch·vocab,
bnss = batch·heads·seq², nss = heads·seq²):

    F  = layers·(c_h·sbh + c_f·sbf + c_s·bnss) + e_h·sbh + e_v·sbv + e_s·nss
    Fc = layers·k_h·sbh + max(one layer's transient, F's head terms)  (activation checkpointing;
         k_h from the difference of 8 and 4 checkpointed layers)

and, at micro-batches where the start of the backward pass is the peak, what it adds:

    B − F = g_v·sbv + g_h·sbh                                          (loss and logits gradients)
    Bc − Fc' = gc_v·sbv + gc_h·sbh    (checkpointed; Fc' = the analytic model's checkpointed forward)

and the checkpointed backward's other peak, the last block recomputed beside its gradients once the head is freed
(which sets the peak under a small head: a classifier, a fused or chunked loss), on steps with a 256-row vocabulary,
fitted to micro-batch differences that cancel the parameters' gradients (:func:`_block_backward`):

    ΔBc − Δ(layers·k_h·sbh + one layer) = d_h·Δsbh + d_f·Δsbf

F and B are the simulated phase peaks less the weights (fp32 parameters and, under mixed
precision, autocast's 16-bit copies of the matmul weights). The coefficients go to
``advisor/data/activations.json``; ``advisor/engine/memory.py`` reads them. A run keeps the columns it does not
make (LitGPT's, ``benchmarks/calibrate_litgpt.py``; the families not named). All families take about 45 minutes on
2 cores.

Usage: HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/calibrate_activations.py [--out FILE] [--only TEXT] [--block-only]
[FAMILY ...] (families named: only those are calibrated again, the others kept; ``--block-only``: only the
block-backward terms of the columns there, a column not there whole; ``--out FILE`` writes another file; ``--only
qlora`` refits only the columns whose name holds that text, the others kept)
"""

from __future__ import annotations

import json
import platform
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.engine.memory import calibration_keys, recomputed_block_bytes  # noqa: E402
from advisor.measure.simulate import simulate  # noqa: E402
from probes.adapters import adapter_parameters  # noqa: E402
from advisor.core.errors import UsageError  # noqa: E402
from advisor.core.kernels import Framework  # noqa: E402
from advisor.core.vocabulary import Family, LoraTargets, Method, Precision, WeightsDtype  # noqa: E402
from probes.model import load_config, profile_from_config  # noqa: E402
from rules import Plan  # noqa: E402

#: family → (representative catalog model, layer key(s), FFN key, default FFN when the key is absent)
PUBLISHED = ROOT / "benchmarks" / "published" / "configs"  # public config.json files (benchmarks/published)
FAMILIES = {
    "gpt2": ("gpt2", ["n_layer"], "n_inner", lambda c: 4 * c.get("n_embd", 768)),
    "bert": ("bert-base-uncased", ["num_hidden_layers"], "intermediate_size", None),
    "roberta": ("roberta-base", ["num_hidden_layers"], "intermediate_size", None),
    "distilbert": ("distilbert-base-uncased", ["n_layers"], "hidden_dim", None),
    "t5": ("t5-small", ["num_layers", "num_decoder_layers"], "d_ff", None),
    "opt": ("facebook/opt-125m", ["num_hidden_layers"], "ffn_dim", None),
    "llama": ("meta-llama/Llama-2-7b-hf", ["num_hidden_layers"], "intermediate_size", None),
    "mistral": ("mistralai/Mistral-7B-v0.1", ["num_hidden_layers"], "intermediate_size", None),
    "qwen2": ("Qwen/Qwen2.5-7B", ["num_hidden_layers"], "intermediate_size", None),
    "qwen3": ("Qwen/Qwen3-8B", ["num_hidden_layers"], "intermediate_size", None),
    "gemma": (str(PUBLISHED / "google--gemma-2b"), ["num_hidden_layers"], "intermediate_size", None),
    "phi": (str(PUBLISHED / "microsoft--phi-2"), ["num_hidden_layers"], "intermediate_size", None),
    "phi3": (str(PUBLISHED / "microsoft--Phi-3-mini-4k-instruct"), ["num_hidden_layers"], "intermediate_size", None),
    "gpt_neox": (
        str(PUBLISHED / "stabilityai--stablelm-base-alpha-3b"),
        ["num_hidden_layers"],
        "intermediate_size",
        None,
    ),
}
# Not calibrated (the structural formula prices them): gemma2, which transformers builds without SDPA (eager attention
# only); falcon, whose steps this form fits badly (6-11 % forward residuals, 600 % checkpointed with fp32 weights).
#: The families whose sequence-classification head is calibrated too (T5's checks each row's EOS tokens, data-dependent,
#: which fake tensors cannot run; the later decoders' heads are priced by the structural formula, to keep the run short)
CLASSIFICATION = {"gpt2", "bert", "roberta", "distilbert", "opt", "llama", "mistral"}
#: The step classes calibrated for each family (``advisor.engine.calibration.calibration_keys`` names their columns):
#: (precision, weights dtype, method, LoRA targets). LoRA and QLoRA columns are for the family's default task head;
#: a classification head has LoRA's (:data:`CLASSIFIER_LORA_VARIANTS`).
_FP32, _BF16, _W32, _W16 = Precision.FP32.value, Precision.BF16.value, WeightsDtype.FP32.value, WeightsDtype.BF16.value
VARIANTS = [
    (_FP32, _W32, Method.FULL.value, None),
    (_BF16, _W32, Method.FULL.value, None),
    (_BF16, _W16, Method.FULL.value, None),
]
#: QLoRA: bitsandbytes' 4-bit base (advisor.measure.quantized_base), current and < 0.43.2 (5th item: legacy)
LORA_VARIANTS = [(_BF16, _W16, Method.LORA.value, targets.value) for targets in LoraTargets] + [
    (_BF16, _W16, Method.QLORA.value, targets.value, legacy) for legacy in (False, True) for targets in LoraTargets
]


#: LoRA over a classification head (a reward model, a classifier): its own columns, since all-linear adapters keep
#: more under checkpointing than full fine-tuning's column prices (-20 % on a 4-layer bert-base); QLoRA falls back to
#: them (advisor.engine.calibration.calibration_keys)
CLASSIFIER_LORA_VARIANTS = [v for v in LORA_VARIANTS if v[2] == Method.LORA.value]


def _plan(variant: tuple, ckpt: bool, b: int) -> Plan:
    precision, weights, method, targets, *legacy = variant
    extra = {"lora_targets": targets} if targets else {}
    if legacy:
        extra["legacy_bitsandbytes"] = legacy[0]
    return Plan(
        device="cuda",
        precision=precision,
        tf32=False,
        optimizer="sgd",
        gradient_checkpointing=ckpt,
        micro_batch_size=b,
        gradient_accumulation_steps=1,
        parallelism="none",
        num_gpus=1,
        weights_dtype=weights,
        method=method,
        **extra,
    )


def design_config(
    model_id: str, layer_keys: list[str], ffn_key: str, default_ffn, layers: int, ffn_mult: int, vocab_extra: int
) -> dict:
    """The family's config.json dict at a design row's shape: ``layers`` blocks (each of ``layer_keys``), the FFN
    width times ``ffn_mult`` (``default_ffn(raw)`` where the config leaves it out), ``vocab_extra`` more rows."""
    raw = dict(load_config(model_id)[0])
    ffn0 = raw.get(ffn_key) or default_ffn(raw)
    for key in layer_keys:
        raw[key] = layers
    raw[ffn_key] = ffn0 * ffn_mult
    raw["vocab_size"] = raw["vocab_size"] + vocab_extra
    if isinstance(raw.get("pad_token_id"), int) and raw["pad_token_id"] >= raw["vocab_size"]:  # the small vocabulary
        raw["pad_token_id"] = raw["vocab_size"] - 1  # of the block-backward design (phi3 pads with id 32000)
    return raw


def _run(
    model_id: str,
    layer_keys: list[str],
    ffn_key: str,
    default_ffn,
    variant: tuple,
    ckpt: bool,
    layers: int,
    ffn_mult: int,
    vocab_extra: int,
    b: int,
    seq: int = 256,
    task: str | None = None,
) -> dict:
    raw = design_config(model_id, layer_keys, ffn_key, default_ffn, layers, ffn_mult, vocab_extra)
    prof = profile_from_config(raw, model_id, task=task)
    plan = _plan(variant, ckpt, b)
    result = simulate(prof, plan, seq, steps=1, config=raw)
    # the weights as built (16-bit base, fp32 adapters), plus autocast's cached 16-bit copies of fp32 trainable weights
    autocast_copies = variant[0] != _FP32 and variant[1] == _W32 and variant[2] == Method.FULL.value
    weights = result.build_bytes + (2 * prof.matmul_parameters if autocast_copies else 0)
    # and of the fp32 adapters: autocast caches their 16-bit copies through the forward, autograd keeps them into the
    # backward unless checkpointing dropped them; a constant per layer that the memory model prices as model states
    # (states.py: copies16), which the per-token coefficients must not absorb (they did: 1.2 h bytes a token in each
    # checkpointed all-linear LoRA layer at the design's 512 tokens, 0.004 at 128k)
    copies = (
        2 * adapter_parameters(prof, plan.lora_rank, plan.lora_targets)
        if (variant[0] != _FP32 and Method.of(variant[2]).spec.adapters)
        else 0
    )
    sb = seq * b
    nss = prof.num_attention_heads * seq * seq
    return {
        "L": layers,
        "sbh": sb * prof.hidden_size,
        "sbf": sb * prof.ffn_size,
        "sbv": sb * prof.vocab_size,
        "bnss": b * nss,
        "nss": nss,
        "F": result.phase_peaks["forward"] - weights - copies,
        "B": result.phase_peaks["backward"] - weights - (0 if ckpt else copies),
    }


def _fit(rows: list[dict], columns: list, target) -> list[float]:
    a = np.array([[c(r) for c in columns] for r in rows], dtype=float)
    y = np.array([target(r) for r in rows], dtype=float)
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    pred = a @ coef
    worst = float(np.max(np.abs(pred - y) / np.maximum(np.abs(y), 1)))
    return [float(c) for c in coef], worst


def _transformers_runner(family: str, variant: tuple, task: str | None):
    """``(run, small_vocabulary, encoder_decoder)``: :func:`calibrate`'s ``run`` over the family's transformers
    model, the vocabulary step that leaves :data:`SMALL_VOCABULARY` rows, and whether a layer is an encoder +
    decoder pair."""
    model_id, layer_keys, ffn_key, default_ffn = FAMILIES[family]
    raw = load_config(model_id)[0]

    def run(ckpt, *design):
        return _run(model_id, layer_keys, ffn_key, default_ffn, variant, ckpt, *design, task=task)

    pairs = profile_from_config(raw, model_id, task=task).family == Family.ENCODER_DECODER
    return run, SMALL_VOCABULARY - raw["vocab_size"], pairs


def calibrate(
    family: str,
    variant: tuple,
    task: str | None = None,
    run=None,
    extra_vocabulary: int = 512,
    layer_differences: bool = False,
) -> dict:
    """The coefficients of one class of step (``variant``) for ``family``; ``run(ckpt, layers, ffn_multiple,
    extra_vocabulary, micro_batch, seq)`` simulates one design row (default: the transformers model's step,
    :func:`_run`; ``benchmarks/calibrate_litgpt.py`` gives LitGPT's). ``extra_vocabulary``: the vocabulary rows the
    design adds to separate the head's vocabulary term from its width term (a multiple of 64; transformers' head is
    exactly linear in the vocabulary, so 512 rows do; LitGPT's chunked head needs a larger step).
    ``layer_differences``: fit the per-layer terms to F(4 layers) - F(2 layers) at four shapes, then the head's to
    what the shallow rows keep beyond their layers, on (sbh, sbv) without an s² term. A head that is not linear in
    (sbh, sbv, nss) then cannot leak into the per-layer terms, which a deep model multiplies: LitGPT's chunked head and loss keep a 128-token chunk's
    fp32 logits whatever the batch, and the joint fit had put gemma's layers 51 % above its simulated 26-layer step
    (``calibrate_litgpt.py``)."""
    v1 = extra_vocabulary
    small_vocabulary = None  # the block-backward design's vocabulary step (transformers' steps only)
    encoder_decoder = False
    if run is None:
        run, small_vocabulary, encoder_decoder = _transformers_runner(family, variant, task)

    # (layers, FFN multiple, extra vocabulary, micro-batch, seq)
    plain = [
        run(False, *d)
        for d in [
            (1, 1, 0, 2, 256),
            (2, 1, 0, 2, 256),
            (2, 2, 0, 2, 256),
            (1, 1, v1, 2, 256),
            (1, 1, 0, 4, 256),
            (2, 1, 0, 2, 512),
            (1, 1, 0, 4, 512),
            (2, 2, v1, 4, 128),
        ]
    ]
    ckpt = [
        run(True, *d)
        for d in [(1, 1, 0, 2, 256), (2, 1, 0, 2, 256), (1, 1, v1, 2, 256), (1, 1, 0, 4, 512), (2, 1, 0, 2, 512)]
    ]
    start = [run(False, *d) for d in [(1, 1, 0, 16, 256), (1, 1, v1, 16, 256), (1, 1, 0, 32, 128)]]
    ckpt_start = [run(True, *d) for d in [(1, 1, 0, 16, 256), (1, 1, v1, 16, 256), (1, 1, 0, 32, 128)]]
    cols = [
        lambda r: r["L"] * r["sbh"],
        lambda r: r["L"] * r["sbf"],
        lambda r: r["L"] * r["bnss"],
        lambda r: r["sbh"],
        lambda r: r["sbv"],
        lambda r: r["nss"],
    ]
    if layer_differences:
        pairs = [
            (run(False, 4, *d), run(False, 2, *d))
            for d in [(1, 0, 2, 256), (2, 0, 2, 256), (1, 0, 2, 512), (1, 0, 4, 128)]
        ]
        per_layer = [{**r4, "F": (r4["F"] - r2["F"]) / 2} for r4, r2 in pairs]
        (c_h, c_f, c_s), w_layer = _fit(
            per_layer, cols[3:4] + [lambda r: r["sbf"], lambda r: r["bnss"]], lambda r: r["F"]
        )
        # the heads on (sbh, sbv) only: a head without attention has no s² term, and one fitted to the design's
        # sequences went negative (under-pricing) at longer ones; a constant per chunk lands in the sbv term
        e_s = ec_s = 0.0

        def layers(r: dict) -> float:
            return r["L"] * (c_h * r["sbh"] + c_f * r["sbf"] + c_s * r["bnss"])

        (e_h, e_v), _ = _fit(plain, cols[3:5], lambda r: r["F"] - layers(r))
        # the worst residual of the whole forward (what the layers leave can be near 0)
        w1 = max(
            w_layer, max(abs(layers(r) + e_h * r["sbh"] + e_v * r["sbv"] - r["F"]) / max(abs(r["F"]), 1) for r in plain)
        )
        (_k_shallow, ec_h, ec_v), w2 = _fit(ckpt, [cols[0], cols[3], cols[4]], lambda r: r["F"])
    else:
        (c_h, c_f, c_s, e_h, e_v, e_s), w1 = _fit(plain, cols, lambda r: r["F"])
        (_k_shallow, ec_h, ec_v, ec_s), w2 = _fit(ckpt, [cols[0], cols[3], cols[4], cols[5]], lambda r: r["F"])
    # what each checkpointed layer keeps, from a deep difference (at 1-2 layers one layer's
    # recomputable internals set the forward peak and blur it): (F(8 layers) - F(4)) / (4·sbh)
    deep = [(run(True, 4, 1, 0, b, s), run(True, 8, 1, 0, b, s)) for b, s in ((2, 256), (4, 128))]
    k_h = sum((r8["F"] - r4["F"]) / (4 * r4["sbh"]) for r4, r8 in deep) / len(deep)
    (g_v, g_h), w3 = _fit(start, [lambda r: r["sbv"], lambda r: r["sbh"]], lambda r: r["B"] - r["F"])

    def ckpt_forward(r: dict) -> float:
        layer = c_h * r["sbh"] + c_f * r["sbf"] + c_s * r["bnss"]
        return r["L"] * k_h * r["sbh"] + max(layer, e_h * r["sbh"] + e_v * r["sbv"] + e_s * r["nss"])

    (gc_v, gc_h), w4 = _fit(ckpt_start, [lambda r: r["sbv"], lambda r: r["sbh"]], lambda r: r["B"] - ckpt_forward(r))
    coef = {
        "layer_h": c_h,
        "layer_f": c_f,
        "layer_s": c_s,
        "head_h": e_h,
        "head_v": e_v,
        "head_s": e_s,
        "ckpt_layer_h": k_h,
        "ckpt_head_h": ec_h,
        "ckpt_head_v": ec_v,
        "ckpt_head_s": ec_s,
        "backward_v": g_v,
        "backward_h": g_h,
        "ckpt_backward_v": gc_v,
        "ckpt_backward_h": gc_h,
        "fit_worst_relative_residual": {
            "forward": w1,
            "checkpointed_forward": w2,
            "backward_start": w3,
            "checkpointed_backward_start": w4,
        },
    }
    return coef if small_vocabulary is None else with_block_backward(coef, run, small_vocabulary, encoder_decoder)


#: The block-backward terms are kept where their fit prices the whole backward peak within this fraction (a larger
#: residual: the form does not describe the step, and the start-of-backward terms alone price it, as before)
BLOCK_FIT_LIMIT = 0.05


def with_block_backward(coef: dict, run, vocab_extra: int, encoder_decoder: bool) -> dict:
    """``coef`` with the block-backward terms (:func:`_block_backward`) and their residual, the terms only where the
    fit is within :data:`BLOCK_FIT_LIMIT`."""
    coef = {k: v for k, v in coef.items() if k not in ("ckpt_block_h", "ckpt_block_f")}
    block = _block_backward(run, vocab_extra, coef, encoder_decoder)
    if block["worst"] <= BLOCK_FIT_LIMIT:
        coef.update(ckpt_block_h=block["ckpt_block_h"], ckpt_block_f=block["ckpt_block_f"])
    coef["fit_worst_relative_residual"] = {
        **coef["fit_worst_relative_residual"],
        "checkpointed_block_backward": block["worst"],
    }
    return coef


#: The block-backward design: (layers, FFN multiple, sequence) at micro-batches 64 and 128, with a vocabulary of
#: :data:`SMALL_VOCABULARY` rows so that the head's logits cannot set the backward peak, at micro-batches large
#: enough that the activations, not the parameters' gradients, set where in the backward the peak falls
BLOCK_SHAPES = [(2, 1, 256), (2, 2, 256), (2, 1, 512), (3, 1, 512)]
SMALL_VOCABULARY = 256


def _block_backward(run, vocab_extra: int, c: dict, encoder_decoder: bool) -> dict:
    """The checkpointed backward's other peak: the last block recomputed, beside its gradients, once the head's
    logits and their gradient are freed. ``c``: the column's fitted layer and kept-input terms, which price the kept
    block inputs plus one recomputed block (an encoder-decoder pair's decoder block: ``encoder_decoder``); the fit
    is of what the backward adds to them, per token, on micro-batch differences (B(128) - B(64) at one shape), which
    cancel the parameters' gradients (the same at both micro-batches):

        ΔBc − Δ(L·k_h·sbh + one layer) = d_h·Δsbh + d_f·Δsbf
    """

    def recomputed(r: dict) -> float:  # the kept inputs and one block, as advisor/engine/memory.py prices them
        layer = c["layer_h"] * r["sbh"] + c["layer_f"] * r["sbf"] + c["layer_s"] * r["bnss"]
        return r["L"] * c["ckpt_layer_h"] * r["sbh"] + recomputed_block_bytes(
            c, r["sbh"], r["sbf"], layer, encoder_decoder
        )

    rows = []
    for layers, ffn, seq in BLOCK_SHAPES:
        small, large = (run(True, layers, ffn, vocab_extra, b, seq) for b in (64, 128))
        rows.append(
            {
                "sbh": large["sbh"] - small["sbh"],
                "sbf": large["sbf"] - small["sbf"],
                "B": large["B"] - small["B"],
                "y": (large["B"] - recomputed(large)) - (small["B"] - recomputed(small)),
            }
        )
    (d_h, d_f), _ = _fit(rows, [lambda r: r["sbh"], lambda r: r["sbf"]], lambda r: r["y"])
    # the worst residual relative to the whole backward peak it prices (the increment alone can be near 0)
    worst = max(abs(d_h * r["sbh"] + d_f * r["sbf"] - r["y"]) / r["B"] for r in rows)
    return {"ckpt_block_h": d_h, "ckpt_block_f": d_f, "worst": worst}


BLOCK_ONLY_NOTE = "the block-backward terms; a column the file lacked, whole"  #: a --block-only refit's provenance
LITGPT_PREFIX = f"{Framework.LITGPT.value}:"  #: the columns calibrate_litgpt.py fits (advisor.engine.calibration)


def _quantized_stack() -> dict:
    """The versions the QLoRA columns were simulated with (bitsandbytes' 4-bit base, peft's adapters)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return {
            "qlora_columns": {
                "date": str(date.today()),
                "bitsandbytes": version("bitsandbytes"),
                "peft": version("peft"),
            }
        }
    except PackageNotFoundError:
        return {}


def main() -> None:
    import torch
    import transformers

    start = time.perf_counter()
    args = sys.argv[1:]
    out = ROOT / "advisor" / "data" / "activations.json"
    only = None  # --only TEXT: refit only the columns whose name holds TEXT (e.g. qlora), keep the others
    block_only = "--block-only" in args  # refit only the block-backward terms of the columns there (the rest kept)
    args = [a for a in args if a != "--block-only"]
    while args[:1] in (["--out"], ["--only"]):
        if args[0] == "--out":  # another file (e.g. to calibrate two sets of families at once, then merge)
            out = Path(args[1])
        else:
            only = args[1]
        args = args[2:]
    chosen = args or list(FAMILIES)
    unknown = sorted(set(chosen) - set(FAMILIES))
    if unknown:
        sys.exit(f"calibrate_activations.py: unknown families {unknown}; known: {sorted(FAMILIES)}")
    # what this run does not make stays: LitGPT's columns (calibrate_litgpt.py), the families not named, and
    # their provenance
    table: dict = json.loads(out.read_text()) if out.exists() else {}
    run = {
        "date": str(date.today()),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }
    if table.get("_meta") and (args or only or block_only):  # a partial refit: the others keep their provenance
        what = {"only": only} if only else {"only": BLOCK_ONLY_NOTE} if block_only else {}
        for family in chosen:
            table["_meta"].setdefault("refits", {})[family] = {**run, **what}
    else:
        table["_meta"] = {
            **run,
            "method": __doc__.split("\n\n")[1].replace("\n", " "),
            **_quantized_stack(),
            **{k: v for k, v in table.get("_meta", {}).items() if k == "litgpt_columns"},
        }
    for family in chosen:
        model_id = FAMILIES[family][0]
        keep_all = only is not None or block_only
        kept = {
            task: {k: v for k, v in columns.items() if keep_all or k.startswith(LITGPT_PREFIX)}
            for task, columns in table.get(family, {}).items()
        }
        table[family] = {}
        default = profile_from_config(load_config(model_id)[0], model_id).task
        for task in dict.fromkeys([default] + (["sequence-classification"] if family in CLASSIFICATION else [])):
            table[family][task] = kept.pop(task, {})
            for variant in VARIANTS + (LORA_VARIANTS if task == default else CLASSIFIER_LORA_VARIANTS):
                key = calibration_keys(_plan(variant, False, 1))[0]
                if only is not None and only not in key:
                    continue
                try:
                    if block_only and key in table[family][task]:
                        coef = with_block_backward(
                            table[family][task][key], *_transformers_runner(family, variant, task)
                        )
                    else:
                        coef = calibrate(family, variant, task)
                except (UsageError, ValueError) as exc:  # e.g. attention-only adapters of a model type without
                    # known projections (UsageError), or a model transformers cannot build with SDPA (ValueError)
                    print(f"{family:10s} {task:24s} {key}: skipped ({exc})", flush=True)
                    continue
                table[family][task][key] = coef
                print(
                    f"{family:10s} {task:24s} {key:5s} "
                    + " ".join(f"{k}={v:.2f}" for k, v in coef.items() if isinstance(v, float))
                    + f" residuals={coef['fit_worst_relative_residual']}",
                    flush=True,
                )
            if not table[family][task]:
                del table[family][task]
        table[family].update(kept)  # the tasks this run did not calibrate (LitGPT's columns are causal-lm's)
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(table, indent=1) + "\n")  # after each family: a long run keeps what it made
    print(f"wrote {out} in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
