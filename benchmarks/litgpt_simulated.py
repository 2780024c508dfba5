"""LitGPT's own fine-tuning step on fake tensors against LitGPT's published peak memory (a diagnostic, issue 13).

advisor prices the Hugging Face stack (transformers + PEFT); most of the published memory readings in
``benchmarks/published.py`` are LitGPT's (its config hub table, ``benchmarks/published/litgpt.jsonl``), whose model
code, LoRA layers and loss differ. This script runs LitGPT 0.4.12's own ``litgpt.lora.GPT`` (the release of the
table's commit, 00af8b0d, 2024-09-27) through advisor's simulator (``advisor.measure.simulate``: fake tensors, a
dispatch mode counting live storage bytes, what ``torch.cuda.max_memory_allocated`` reports), as
``litgpt/finetune/lora.py`` trains: bf16-true (the model built in bf16, no autocast), the LoRA flags of the case,
``model(x, lm_head_chunk_size=128)`` and LitGPT's ``chunked_cross_entropy``, AdamW over the adapters (QLoRA:
bitsandbytes' paged AdamW, whose unified memory ``max_memory_allocated`` does not count, so no optimizer state).
QLoRA swaps every ``nn.Linear`` for bitsandbytes' 4-bit layer as Lightning's ``BitsandbytesPrecision`` does
(``bnb.nf4``: no double quantization; ``-dq``: double) and runs the ``MatMul4Bit`` of bitsandbytes < 0.43.2 (the
0.42.0 LitGPT pinned): ``advisor.measure.quantized_base.legacy_backward``.

It compares each simulated peak with the published one: where they agree, the gap between advisor's prediction
and the published run is the framework's, not the accounting's; and advisor's analytic prediction (the LitGPT
columns, ``benchmarks/calibrate_litgpt.py``) with the simulated step at the case's full depth, which the
calibration's 1-8-layer design only extrapolates to.

Set-up (LitGPT is not a dependency of advisor; its package ``__init__`` imports Lightning, which this script does
not need: only ``litgpt.config``, ``litgpt.model`` and ``litgpt.lora``, whose two helpers from ``litgpt.utils``
are given here):

    .venv/bin/pip install --no-deps --target /tmp/litgpt-0.4.12 litgpt==0.4.12
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/litgpt_simulated.py --litgpt /tmp/litgpt-0.4.12 [CASE_GLOB]

Writes benchmarks/results/litgpt_simulated.md (with a case glob: prints only).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import statistics
import sys
import time
import types
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from published import run_case  # noqa: E402

CASES = ROOT / "benchmarks" / "published" / "litgpt.jsonl"
OUT = ROOT / "benchmarks" / "results" / "litgpt_simulated.md"
#: the case notes' adapter names → LitGPT's LoRA flags
FLAGS = {
    "query": "lora_query",
    "key": "lora_key",
    "value": "lora_value",
    "projection": "lora_projection",
    "mlp": "lora_mlp",
    "head": "lora_head",
}


#: The functions of ``litgpt/utils.py`` this script needs: the two ``litgpt.config`` and ``litgpt.lora`` import, and
#: the loss ``litgpt/finetune/lora.py`` trains with
UTILS = ("find_multiple", "map_old_state_dict_weights", "chunked_cross_entropy")


def import_litgpt(folder: Path):
    """LitGPT's config, model and LoRA modules from an unpacked wheel, without its package ``__init__`` (which imports
    Lightning): ``litgpt.utils`` holds only :data:`UTILS`, LitGPT's own functions read from its ``utils.py``."""
    import ast
    import importlib
    from typing import Dict, List, Mapping, Union

    import torch

    package = types.ModuleType("litgpt")
    package.__path__ = [str(folder / "litgpt")]
    sys.modules["litgpt"] = package
    source = (folder / "litgpt" / "utils.py").read_text(encoding="utf-8")
    functions = [node for node in ast.parse(source).body if isinstance(node, ast.FunctionDef) and node.name in UTILS]
    utils = types.ModuleType("litgpt.utils")
    utils.__dict__.update(torch=torch, Dict=Dict, List=List, Mapping=Mapping, Union=Union)
    exec(
        compile(ast.Module(body=functions, type_ignores=[]), str(folder / "litgpt" / "utils.py"), "exec"),
        utils.__dict__,
    )
    sys.modules["litgpt.utils"] = utils
    return importlib.import_module("litgpt.lora")


def litgpt_step(
    lora,
    config,
    b: int,
    s: int,
    *,
    quantize: str | None = None,
    legacy: bool = True,
    checkpointing: bool = False,
    optimizer: str = "adamw",
    trainable_all: bool = False,
) -> tuple[dict[str, int], int]:
    """Two LitGPT fine-tuning steps of ``config`` (a ``litgpt.lora.Config``) at micro-batch ``b`` × ``s`` tokens on
    fake tensors: (the live-bytes peak per phase, the bytes live once the model is built), bytes.

    ``quantize``: Lightning's ``bnb.nf4`` / ``bnb.nf4-dq`` for QLoRA (None: bf16 weights); ``legacy``: the
    ``MatMul4Bit`` of bitsandbytes < 0.43.2; ``checkpointing``: every block wrapped as Lightning's FSDP strategy wraps
    them (``activation_checkpointing_policy={Block}``: ``checkpoint_wrapper``, non-reentrant); ``optimizer``: ``adamw``
    over the trainable parameters (QLoRA: none, its paged AdamW lives in unified memory) or ``sgd`` (no state: what
    the calibration runs, as ``calibrate_activations.py`` does); ``trainable_all``: full
    fine-tuning (every weight trains, as ``litgpt/finetune/full.py``)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from advisor.measure.quantized_base import code_book, legacy_backward
    from advisor.measure.simulate import materialize, live_bytes_mode

    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # bf16-true: Fabric builds the model under this default dtype
    try:
        with torch.device("meta"):
            model = lora.GPT(config)
        if not trainable_all:
            lora.mark_only_lora_as_trainable(model)
        if quantize:
            _swap_linears(model, double_quant=quantize.endswith("-dq"))
            with torch.device("cpu"):
                code_book()
        if checkpointing:
            from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper

            for i, block in enumerate(model.transformer.h):
                model.transformer.h[i] = checkpoint_wrapper(block, checkpoint_impl=CheckpointImpl.NO_REENTRANT)
        tracker = live_bytes_mode()
        with FakeTensorMode(allow_non_fake_inputs=True), tracker, legacy_backward(bool(quantize) and legacy):
            materialize(model)
            model.max_seq_length = s  # rebuilds the RoPE cache on the fake device
            model.train()
            params = [p for p in model.parameters() if p.requires_grad]
            step = (
                torch.optim.SGD(params, lr=1e-4)
                if optimizer == "sgd"
                else None
                if quantize
                else torch.optim.AdamW(params, lr=1e-4)
            )
            built = tracker.current
            x = torch.randint(0, config.padded_vocab_size, (b, s))
            for _ in range(2):
                tracker.phase = "forward"
                logits = model(x, lm_head_chunk_size=128)
                logits[-1] = logits[-1][..., :-1, :]
                loss = sys.modules["litgpt.utils"].chunked_cross_entropy(logits, x[..., 1:])
                tracker.phase = "backward"
                loss.backward()
                del loss, logits
                tracker.phase = "optimizer"
                if step is not None:
                    step.step()
                    step.zero_grad(set_to_none=True)
    finally:
        torch.set_default_dtype(default)
    return {k: v for k, v in tracker.phase_peaks.items() if k != "build"}, built


def simulate_case(lora, case: dict) -> int:
    """The simulated peak bytes of one case's training steps (two steps, as advisor's simulator runs them)."""
    notes = case["notes"]
    targets = re.search(r"LoRA on ([a-z,]+)", notes).group(1).split(",")
    quantize = re.search(r"quantize (\S+?),", notes).group(1)
    flags = {flag: name in targets for name, flag in FLAGS.items()}
    # the config hub's dropout is 0.05 or 0.1: any p > 0 keeps the same tensors (output and mask)
    config = lora.Config.from_name(
        case["model"]["id"], lora_r=case["plan"]["lora_rank"], lora_alpha=16, lora_dropout=0.05, **flags
    )
    peaks, _ = litgpt_step(
        lora,
        config,
        case["workload"]["micro_batch_size"],
        case["workload"]["seq_len"],
        quantize=None if quantize == "None" else quantize,
    )
    return max(peaks.values())


def _swap_linears(module, double_quant: bool) -> None:
    """Every ``nn.Linear`` → bitsandbytes' NF4 layer computing in bf16 (Lightning's ``_convert_layers``)."""
    import bitsandbytes as bnb
    import torch

    for name, child in list(module.named_children()):
        if type(child) is torch.nn.Linear:
            with torch.device("meta"):
                new = bnb.nn.Linear4bit(
                    child.in_features,
                    child.out_features,
                    child.bias is not None,
                    compute_dtype=torch.bfloat16,
                    compress_statistics=double_quant,
                    quant_type="nf4",
                )
            new.requires_grad_(False)
            setattr(module, name, new)
        else:
            _swap_linears(child, double_quant)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--litgpt", type=Path, required=True, help="an unpacked litgpt 0.4.12 (pip install --target)")
    parser.add_argument("cases", nargs="?", default="litgpt-confighub-*")
    args = parser.parse_args()
    lora = import_litgpt(args.litgpt)
    rows, errors, analytic, start = [], {"lora": [], "qlora": []}, [], time.perf_counter()
    for line in CASES.read_text().splitlines():
        case = json.loads(line)
        if (
            not fnmatch.fnmatch(case["id"], args.cases)
            or case["plan"]["method"] == "full"
            or not case["measured"].get("memory_bytes")
            or not case["id"].startswith("litgpt-confighub")
        ):
            continue
        measured = case["measured"]["memory_bytes"]
        try:
            peak = simulate_case(lora, case)
        except ValueError as exc:  # a model this LitGPT release does not know (Llama 3.2 came later)
            rows.append(f"| {case['id']} | {measured / 1e9:.2f} | | | | | not simulated: {exc} |")
            print(rows[-1], flush=True)
            continue
        err = peak / measured - 1
        errors[case["plan"]["method"]].append(err)
        # advisor's analytic peak for the case, as published.py prices it
        predicted = run_case({**case, "_file": CASES.stem}).predicted_bytes
        against = predicted / peak - 1 if predicted else None
        if against is not None:
            analytic.append(against)
        rows.append(
            f"| {case['id']} | {measured / 1e9:.2f} | {peak / 1e9:.2f} | {err:+.1%} | "
            f"{predicted / 1e9 if predicted else float('nan'):.2f} | "
            f"{'' if against is None else f'{against:+.1%}'} | |"
        )
        print(rows[-1], flush=True)
    summary = [
        f"{method}: n={len(e)} median {statistics.median(e):+.1%} range {min(e):+.1%} … {max(e):+.1%}"
        for method, e in errors.items()
        if e
    ]
    if analytic:
        summary.append(
            f"advisor's analytic peak vs the simulated step: n={len(analytic)} median "
            f"{statistics.median(analytic):+.1%} range {min(analytic):+.1%} … {max(analytic):+.1%}"
        )
    print("\n".join(summary))
    if args.cases != "litgpt-confighub-*":
        return
    import bitsandbytes
    import torch

    head = [
        f"# LitGPT 0.4.12's own step, simulated, vs LitGPT's published peak ({date.today()})",
        "",
        f"`HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/litgpt_simulated.py --litgpt DIR` "
        f"({time.perf_counter() - start:.0f} s; torch {torch.__version__}, bitsandbytes {bitsandbytes.__version__} "
        "running the < 0.43.2 MatMul4Bit for QLoRA). Published: `max_memory_allocated` in decimal GB "
        "(benchmarks/published/litgpt.jsonl); simulated: the same quantity. Error = simulated / published - 1. "
        "advisor: `benchmarks/published.py`'s prediction for the case (`--framework litgpt`, the LitGPT columns "
        "of `advisor/data/activations.json`), against the simulated step.",
        "",
        *[f"- {line}" for line in summary],
        "",
        "| case | published GB | simulated GB | error | advisor GB | advisor / simulated | note |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    OUT.write_text("\n".join(head + rows) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
