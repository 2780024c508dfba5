"""Calibrate the activation columns of LitGPT's own training step (``Plan.framework`` litgpt), as
``calibrate_activations.py`` calibrates the transformers model's: the same design (1-2 layers of each family's real
width, varying layers, FFN size, vocabulary, micro-batch and sequence length; 4 and 8 checkpointed layers) and the
same least-squares fit, over LitGPT 0.4.12's ``litgpt.lora.GPT`` run by ``benchmarks/litgpt_simulated.py:litgpt_step``
(bf16-true, LitGPT's chunked LM head and loss, Lightning's block checkpointing and NF4 layers).

Classes (columns ``litgpt:<transformers column>`` in ``advisor/data/activations.json``): full fine-tuning over bf16
weights; LoRA on the query and value projections (LitGPT's default), on the attention projections (LitGPT's query,
key, value, projection) or on every block linear layer (those and the MLP's; not the LM head, as PEFT's all-linear); QLoRA over Lightning's ``bnb.nf4-dq`` layers with
bitsandbytes < 0.43.2's ``MatMul4Bit`` (LitGPT pinned 0.42.0; a LitGPT QLoRA plan on a current bitsandbytes falls
back to the transformers model's QLoRA column).

Usage (LitGPT is not a dependency; see ``litgpt_simulated.py`` for the set-up):
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/calibrate_litgpt.py --litgpt DIR [--out FILE] [--only TEXT]
        [FAMILY ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from calibrate_activations import calibrate  # noqa: E402
from litgpt_simulated import import_litgpt, litgpt_step  # noqa: E402

from advisor.engine.memory import calibration_keys  # noqa: E402
from advisor.core.kernels import Framework  # noqa: E402
from advisor.core.vocabulary import LoraTargets, Method, Precision, WeightsDtype  # noqa: E402
from rules import Plan  # noqa: E402

#: advisor's family → the LitGPT 0.4.12 model whose width calibrates it
FAMILIES = {
    "llama": "Llama-2-7b-hf",
    "mistral": "Mistral-7B-v0.1",
    "gemma": "gemma-2b",
    "gemma2": "gemma-2-2b",
    "phi": "phi-2",
    "phi3": "Phi-3-mini-4k-instruct",
    "falcon": "falcon-7b",
    "gpt_neox": "stablelm-base-alpha-3b",
}
#: how the columns were made, as activations.json's ``_meta`` says it
METHOD = (
    "benchmarks/calibrate_litgpt.py: the same design and fit as the transformers columns, over LitGPT 0.4.12's "
    "simulated step, the design's vocabulary step half the family's vocabulary, the per-layer terms fitted to "
    "4-layer minus 2-layer steps (calibrate(layer_differences=True))"
)
#: advisor's LoRA targets → LitGPT's LoRA flags
TARGETS = {
    LoraTargets.QUERY_VALUE.value: ("lora_query", "lora_value"),
    LoraTargets.ATTENTION.value: ("lora_query", "lora_key", "lora_value", "lora_projection"),
    LoraTargets.ALL_LINEAR.value: ("lora_query", "lora_key", "lora_value", "lora_projection", "lora_mlp"),
}
#: (method, LoRA targets, bitsandbytes < 0.43.2)
VARIANTS = (
    [(Method.FULL.value, None, False)]
    + [(Method.LORA.value, t.value, False) for t in LoraTargets]
    + [(Method.QLORA.value, t.value, True) for t in LoraTargets]
)


def column(variant: tuple) -> str:
    """The activations.json column of a variant (``calibration_keys`` of its plan)."""
    method, targets, legacy = variant
    plan = Plan(
        device="cuda",
        precision=Precision.BF16.value,
        tf32=False,
        optimizer="sgd",
        gradient_checkpointing=False,
        micro_batch_size=1,
        gradient_accumulation_steps=1,
        parallelism="none",
        num_gpus=1,
        weights_dtype=WeightsDtype.BF16.value,
        method=method,
        framework=Framework.LITGPT.value,
        legacy_bitsandbytes=legacy,
        **({"lora_targets": targets} if targets else {}),
    )
    return calibration_keys(plan)[0]


def runner(lora, name: str, variant: tuple):
    """``calibrate``'s ``run``: one design row of LitGPT's step for ``variant``."""
    method, targets, legacy = variant
    base = lora.Config.from_name(name)

    def run(ckpt: bool, layers: int, ffn_mult: int, vocab_extra: int, b: int, seq: int) -> dict:
        flags = {flag: True for flag in TARGETS.get(targets, ())}
        vocab = base.padded_vocab_size + vocab_extra
        config = lora.Config.from_name(
            name,
            n_layer=layers,
            intermediate_size=base.intermediate_size * ffn_mult,
            padded_vocab_size=vocab,
            vocab_size=vocab,
            **({"lora_r": 16, "lora_alpha": 16, "lora_dropout": 0.05, **flags} if targets else {}),
        )
        # full fine-tuning: no adapters (r = 0: LoRA layers are plain linears), every weight trains, as LitGPT's full.py
        peaks, built = litgpt_step(
            lora,
            config,
            b,
            seq,
            checkpointing=ckpt,
            optimizer="sgd",
            legacy=legacy,
            quantize="bnb.nf4-dq" if method == Method.QLORA.value else None,
            trainable_all=method == Method.FULL.value,
        )
        sb, nss = seq * b, config.n_head * seq * seq
        return {
            "L": layers,
            "sbh": sb * config.n_embd,
            "sbf": sb * config.intermediate_size,
            "sbv": sb * vocab,
            "bnss": b * nss,
            "nss": nss,
            "F": peaks["forward"] - built,
            "B": peaks["backward"] - built,
        }

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--litgpt", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=ROOT / "advisor" / "data" / "activations.json")
    parser.add_argument("--only", metavar="TEXT", help="refit only the columns whose name holds TEXT (e.g. q-v)")
    parser.add_argument("families", nargs="*", default=list(FAMILIES))
    args = parser.parse_args()
    lora = import_litgpt(args.litgpt)
    table = json.loads(args.out.read_text())
    start = time.perf_counter()
    for family in args.families:
        columns = table.setdefault(family, {}).setdefault("causal-lm", {})
        for variant in VARIANTS:
            key = column(variant)
            if args.only and args.only not in key:
                continue
            # half the vocabulary again: LitGPT's chunked head and loss keep per-chunk temporaries, so a few hundred
            # extra rows (the transformers calibration's step) leave the vocabulary term unidentified against the
            # width term, and extrapolating to a wider model of the family (gemma-7b from gemma-2b) went wild
            extra = lora.Config.from_name(FAMILIES[family]).padded_vocab_size // 2 // 64 * 64
            columns[key] = calibrate(
                family,
                variant,
                run=runner(lora, FAMILIES[family], variant),
                extra_vocabulary=extra,
                layer_differences=True,
            )
            print(
                f"{family:10s} {key} "
                + " ".join(f"{k}={v:.2f}" for k, v in columns[key].items() if isinstance(v, float))
                + f" residuals={columns[key]['fit_worst_relative_residual']}",
                flush=True,
            )
        args.out.write_text(json.dumps(table, indent=1) + "\n")  # after each family
    table["_meta"]["litgpt_columns"] = {
        "litgpt": "0.4.12",
        "date": time.strftime("%Y-%m-%d"),
        "families": sorted(f for f in table if "litgpt:bf16" in table.get(f, {}).get("causal-lm", {})),
        "method": METHOD,
    }
    args.out.write_text(json.dumps(table, indent=1) + "\n")
    print(f"wrote {args.out} in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
