"""Which column of ``advisor/data/activations.json`` prices a plan's activations: the class of simulated steps
(``benchmarks/calibrate_activations.py``, ``benchmarks/calibrate_litgpt.py``) whose tensors the plan keeps.
:mod:`advisor.engine.memory` reads the coefficients."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

from advisor.engine.structural import sixteen_bit_weights
from advisor.core.kernels import Framework
from advisor.core.vocabulary import LoraTargets, Method, Precision, WeightsDtype
from advisor.core.plan import Plan

MIXED_COLUMN = "mixed"  #: the activations.json column of fp32 weights under autocast (:func:`calibration_keys`)
LEGACY_BNB_SUFFIX = "+keeps-inputs"  #: QLoRA columns of bitsandbytes < 0.43.2 (:func:`calibration_keys`)


@lru_cache(maxsize=1)
def _calibration() -> dict:
    """Per-family activation coefficients fitted to simulated steps (benchmarks/calibrate_activations.py)."""
    text = resources.files("advisor").joinpath("data/activations.json").read_text(encoding="utf-8")
    return json.loads(text)


def calibration_keys(plan: Plan) -> list[str]:
    """The columns of ``advisor/data/activations.json`` that price ``plan``'s activations, most specific first.

    A column is one class of simulated steps (benchmarks/calibrate_activations.py): ``fp32``; ``mixed`` (fp32
    weights under autocast: fp32 residual stream and norms); ``bf16`` (16-bit weights, "pure bf16": the residual
    stream in 16 bits), which is also what ZeRO and FSDP compute with under mixed precision: DeepSpeed casts the
    module to the 16-bit dtype and keeps the fp32 masters in the optimizer (ZeRO paper sec. 5;
    https://www.deepspeed.ai/docs/config-json/#bfloat16-training-options), FSDP gathers parameters in
    ``MixedPrecision.param_dtype`` (https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.MixedPrecision);
    and, for LoRA / QLoRA, the same with ``+lora-<targets>``: a frozen linear layer saves no
    input for a weight gradient (PyTorch saves a matmul's input only when the weight requires grad), while each
    adapter saves its own. QLoRA has its own columns (``+qlora-<targets>``), fitted to steps over bitsandbytes'
    4-bit layers (:mod:`advisor.measure.quantized_base`): since bitsandbytes 0.43.2 their ``MatMul4Bit`` keeps no
    input for backward (``ctx.tensors = (None, B)`` in ``bitsandbytes/autograd/_functions.py``), and PEFT's 4-bit
    LoRA layer does not cast its input to the fp32 adapters under autocast (``peft/tuners/lora/bnb.py``); older
    versions kept the input of every 4-bit layer (``(A, B)``, changed by bitsandbytes PR 1270:
    https://github.com/bitsandbytes-foundation/bitsandbytes/pull/1270): the ``+keeps-inputs`` columns
    (``Plan.legacy_bitsandbytes``). A family without QLoRA columns falls back to LoRA's
    (legacy: full fine-tuning's). The last column is the fallback every family has. A LitGPT plan
    (``Plan.framework``) looks for the same columns prefixed ``litgpt:`` first, fitted to LitGPT's own simulated step
    (``benchmarks/calibrate_litgpt.py``), then the transformers model's. A Megatron-style plan has none: its
    fused layers keep what :func:`advisor.engine.structural.layer_activation_bytes` counts."""
    if plan.framework == Framework.MEGATRON:
        return []
    keys = _transformers_keys(plan)
    if plan.framework == Framework.LITGPT:  # LitGPT's own columns first, then the transformers model's
        return [f"{Framework.LITGPT.value}:{k}" for k in keys] + keys
    return keys


def _transformers_keys(plan: Plan) -> list[str]:
    """:func:`calibration_keys` for the transformers + PEFT step."""
    if plan.precision == Precision.FP32:
        return [Precision.FP32.value]
    base = WeightsDtype.BF16.value if sixteen_bit_weights(plan) else MIXED_COLUMN
    spec = Method.of(plan.method).spec
    if not spec.adapters:
        return list(dict.fromkeys([base, MIXED_COLUMN]))
    # q and v adapters without their own columns: the q, k, v, o ones, which keep at most what the k and o adapters
    # add (their inputs: 4·h bytes a token per layer under LoRA without checkpointing, nothing under QLoRA or
    # checkpointing, on the simulated Llama step)
    targets = [plan.lora_targets] + (
        [LoraTargets.ATTENTION.value] if plan.lora_targets == LoraTargets.QUERY_VALUE else []
    )
    if spec.quantized_base and plan.legacy_bitsandbytes:
        # without its column: full fine-tuning's, which keeps every linear layer's input too
        return [f"{base}+{plan.method}-{t}{LEGACY_BNB_SUFFIX}" for t in targets] + [base, MIXED_COLUMN]
    columns = [f"{base}+{method}-{t}" for method in dict.fromkeys([plan.method, Method.LORA.value]) for t in targets]
    # (a 4-bit layer without its input is a frozen one: QLoRA falls back to LoRA's column)
    return list(dict.fromkeys([*columns, base, MIXED_COLUMN]))
