"""A LoRA / QLoRA plan in the words of PEFT, bitsandbytes and transformers: the keyword arguments of
``peft.LoraConfig``, ``transformers.BitsAndBytesConfig`` and ``from_pretrained``'s dtype.

The emitter (:mod:`advisor.app.emit`) writes them, the simulator and the trials
(:mod:`advisor.measure.trainable`) build the same adapters from them, so what is priced, simulated,
trialled and emitted is one configuration. Plain values in, plain dicts out: no torch, no peft.

Choices, with their sources:

- ``lora_alpha = 2·r``: alpha/r scales the adapters' update the way a learning rate does (LoRA,
  arXiv:2106.09685 sec. 4.1: with Adam, tuning alpha is roughly tuning the learning rate), so it
  costs no memory and no time; 2·r is the common heuristic the rule ``method.adapters-when-full-does-not-fit``
  names (e.g. https://theneuralbase.com/fine-tuning-fundamentals/learn/beginner/alpha-2-rank-rule-of-thumb/).
  The QLoRA repository trains with r = 64, alpha = 16 (``qlora.py``, artidoro/qlora@00e5ad2): tune it
  with the learning rate.
- ``lora_dropout = 0.0``: PEFT's default (``LoraConfig.lora_dropout``,
  https://huggingface.co/docs/peft/package_reference/lora#peft.LoraConfig) and the QLoRA repository's
  (``qlora.py``, artidoro/qlora@00e5ad2), and the only value the memory model prices: with p > 0 PEFT
  applies ``nn.Dropout`` to every adapted layer's input, which keeps a dropped copy of that input for
  the backward pass; raise it knowing that the estimate does not include it.
- ``target_modules``: ``"all-linear"`` (PEFT's shorthand for every linear layer but the output
  head, after the QLoRA repository), the attention projections q, k, v, o of the model type,
  :data:`ATTENTION_MODULES`, or its q and v only (``q-v``: PEFT's own default for Llama-style models,
  written out so that the adapters are the ones ``probes.adapters`` counts whatever PEFT's defaults become).
- ``target_parameters`` (a mixture of experts under all-linear): the routed experts' 3-D ``gate_up_proj`` and
  ``down_proj`` and the routers' ``gate.weight`` (:data:`EXPERT_TARGET_PARAMETERS`), which are not ``nn.Linear`` in
  transformers 5 and so only PEFT's ``target_parameters`` (PEFT >= 0.17, ``lora.ParamWrapper``) reaches, with
  ``gate_up_proj`` at rank 2r and alpha 2·alpha (``rank_pattern`` / ``alpha_pattern``): exactly what PEFT 0.21 makes of
  all-linear on its own for the types it converts (``peft/utils/transformers_weight_conversion.py``), written out for
  every MoE type (PEFT leaves Qwen2-MoE's experts frozen otherwise) and for versions that do not convert;
  :mod:`probes.adapters` counts them. ``lora_dropout`` must stay 0 (``ParamWrapper`` refuses dropout).
- QLoRA's quantization: 4-bit NormalFloat with double quantization, compute in the plan's 16-bit
  dtype (arXiv:2305.14314 sec. 3; transformers' ``BitsAndBytesConfig``,
  https://huggingface.co/docs/transformers/main/en/quantization/bitsandbytes). When ZeRO-3 / FSDP
  shard the frozen base, the 4-bit weights are stored in the compute dtype
  (``bnb_4bit_quant_storage``) so that FSDP / DeepSpeed can flatten them with the other parameters
  (PEFT, "FSDP + QLoRA": https://huggingface.co/docs/peft/accelerate/fsdp#use-peft-qlora-and-fsdp-for-finetuning-large-models-on-multiple-gpus).
"""

from __future__ import annotations

from typing import Any

from advisor.core.errors import UsageError
from probes.adapters import GATE_UP_RANK_FACTOR, adapts_experts
from probes.model import ModelProfile
from advisor.core.vocabulary import LoraTargets, Precision, Task, WeightsDtype

LORA_ALPHA_PER_RANK = 2  #: lora_alpha = 2·r (module docstring)
LORA_DROPOUT = 0.0  #: PEFT's default; the one the memory model prices (module docstring)
ALL_LINEAR = (
    "all-linear"  #: PEFT's ``target_modules`` shorthand (``peft.utils.constants.INCLUDE_LINEAR_LAYERS_SHORTHAND``)
)

#: The attention projections q, k, v and output of each model type, as PEFT's ``target_modules`` (a module
#: matches when its name ends with ``.`` + an entry). Source: the attention classes of transformers'
#: modeling files (``models/<type>/modeling_<type>.py``): LlamaAttention and its copies (Mistral, Mixtral,
#: Qwen2, Qwen2-MoE, Qwen3, Qwen3-MoE, Gemma 1-3) ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``; Phi3Attention one
#: fused ``qkv_proj`` and ``o_proj``; GPT2Attention one fused
#: ``c_attn`` (q, k and v) and ``c_proj`` (``attn.c_proj``: the MLP has a ``c_proj`` too); BertSelfAttention
#: ``query``, ``key``, ``value`` and BertSelfOutput's ``dense`` (``attention.output.dense``: the MLP's output
#: is ``output.dense`` too), RoBERTa the same; DistilBERT's MultiHeadSelfAttention ``q_lin``, ``k_lin``,
#: ``v_lin``, ``out_lin``; T5Attention ``q``, ``k``, ``v``, ``o`` (self- and cross-attention); OPTAttention
#: ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``. tests/app/test_emit.py checks each against the model built.
ATTENTION_MODULES: dict[str, tuple[str, ...]] = {
    **{
        t: ("q_proj", "k_proj", "v_proj", "o_proj")
        for t in (
            "llama",
            "mistral",
            "mixtral",
            "qwen2",
            "qwen2_moe",
            "qwen3",
            "qwen3_moe",
            "gemma",
            "gemma2",
            "gemma3_text",
        )
    },
    "phi3": ("qkv_proj", "o_proj"),
    "gpt2": ("c_attn", "attn.c_proj"),
    "bert": ("query", "key", "value", "attention.output.dense"),
    "roberta": ("query", "key", "value", "attention.output.dense"),
    "distilbert": ("q_lin", "k_lin", "v_lin", "out_lin"),
    "t5": ("q", "k", "v", "o"),
    "opt": ("q_proj", "k_proj", "v_proj", "out_proj"),
}
#: Model types whose block linears are transformers' ``Conv1D`` (weights stored in x out): PEFT needs
#: ``fan_in_fan_out=True`` for them (it corrects the flag with a warning otherwise).
CONV1D_MODEL_TYPES = frozenset({"gpt2"})

#: The parameters PEFT's ``target_parameters`` name on a mixture of experts (module docstring): the names PEFT 0.21's
#: conversion of all-linear produces for transformers 5 MoE models (``_MOE_TARGET_MODULE_MAPPING``), matched as
#: suffixes of each block's ``mlp.experts.gate_up_proj``, ``mlp.experts.down_proj`` and ``mlp.gate.weight``.
EXPERT_TARGET_PARAMETERS = ["gate_up_proj", "down_proj", "gate.weight"]
#: ``rank_pattern`` / ``alpha_pattern``'s key of the fused gate and up projections (PEFT's conversion's own key).
GATE_UP_PATTERN = r".*\.gate_up_proj"

#: PEFT's ``TaskType`` of each task head (``peft.TaskType``; a masked-LM head has none: a plain ``PeftModel``).
PEFT_TASK_TYPES: dict[Task, str | None] = {
    Task.CAUSAL_LM: "CAUSAL_LM",
    Task.SEQ2SEQ_LM: "SEQ_2_SEQ_LM",
    Task.SEQUENCE_CLASSIFICATION: "SEQ_CLS",
    Task.QUESTION_ANSWERING: "QUESTION_ANS",
    Task.MASKED_LM: None,
}

#: Linear layers of a task head that PEFT's ``modules_to_save`` for the task (``SEQ_CLS``: "classifier", "score")
#: matches by name suffix, so that all-linear would put an adapter on a layer PEFT also copies whole, which it refuses
#: ("TypeError: modules_to_save cannot be applied to modules of type lora.Linear", peft 0.21): they are left out of the
#: adapters (``LoraConfig.exclude_modules``, PEFT >= 0.14) and train whole, as PEFT's suffix match makes them.
HEAD_LINEARS_TRAINED_WHOLE: dict[tuple[str, Task], list[str]] = {
    ("distilbert", Task.SEQUENCE_CLASSIFICATION): ["pre_classifier"]
}

#: torch dtype names (``getattr(torch, name)``; transformers and bitsandbytes take them as strings).
COMPUTE_DTYPES: dict[Precision, str] = {
    Precision.BF16: "bfloat16",
    Precision.FP16: "float16",
    Precision.FP32: "float32",
}
WEIGHT_DTYPES: dict[WeightsDtype, str] = {
    WeightsDtype.BF16: "bfloat16",
    WeightsDtype.FP32: "float32",
    WeightsDtype.FP16: "float16",
}


def target_modules(model: ModelProfile, targets: str) -> str | list[str]:
    """PEFT's ``target_modules`` for a :class:`~advisor.core.vocabulary.LoraTargets` value.

    Raises:
        UsageError: attention-only adapters for a model type without a row in :data:`ATTENTION_MODULES`; q and v
            adapters on a model whose q, k and v are one fused layer (GPT-2's ``c_attn``: PEFT adapts whole
            layers).
    """
    chosen = LoraTargets.of(targets)
    if chosen is LoraTargets.ALL_LINEAR:
        return ALL_LINEAR
    names = ATTENTION_MODULES.get(model.model_type)
    if names is None:
        raise UsageError(
            f"advisor does not know the attention projections of {model.model_type} models: use "
            f"--lora-targets {LoraTargets.ALL_LINEAR}"
        )
    if chosen is LoraTargets.QUERY_VALUE:
        if len(names) != 4:
            raise UsageError(
                f"{model.model_type} computes q, k and v in one fused layer ({names[0]}), which PEFT "
                f"adapts whole: use --lora-targets {LoraTargets.ATTENTION}"
            )
        return [names[0], names[2]]
    return list(names)


def lora_config_kwargs(model: ModelProfile, rank: int, targets: str) -> dict[str, Any]:
    """The keyword arguments of ``peft.LoraConfig`` for adapters of rank ``rank`` (>= 1) on ``targets``
    (module docstring: alpha, dropout, target modules, a mixture of experts' target parameters, task type;
    ``bias="none"``: no bias trains).

    Raises:
        UsageError: see :func:`target_modules`.
    """
    kwargs: dict[str, Any] = {
        "r": rank,
        "lora_alpha": LORA_ALPHA_PER_RANK * rank,
        "lora_dropout": LORA_DROPOUT,
        "target_modules": target_modules(model, targets),
        "bias": "none",
    }
    if model.model_type in CONV1D_MODEL_TYPES:
        kwargs["fan_in_fan_out"] = True
    if adapts_experts(model, targets):  # the routed experts and routers (module docstring)
        kwargs["target_parameters"] = list(EXPERT_TARGET_PARAMETERS)
        kwargs["rank_pattern"] = {GATE_UP_PATTERN: GATE_UP_RANK_FACTOR * rank}
        kwargs["alpha_pattern"] = {GATE_UP_PATTERN: GATE_UP_RANK_FACTOR * LORA_ALPHA_PER_RANK * rank}
    whole = HEAD_LINEARS_TRAINED_WHOLE.get((model.model_type, Task.of(model.task)))
    if whole and kwargs["target_modules"] == ALL_LINEAR:
        kwargs["exclude_modules"] = whole
    task_type = PEFT_TASK_TYPES[Task.of(model.task)]
    if task_type is not None:
        kwargs["task_type"] = task_type
    return kwargs


def bnb_config_kwargs(precision: str, *, sharded_base: bool = False, double_quant: bool = True) -> dict[str, Any]:
    """The keyword arguments of ``transformers.BitsAndBytesConfig`` for QLoRA's frozen base: NF4, double
    quantization (unless ``double_quant`` is False: ``Plan.double_quant``), compute in the plan's precision (a
    :class:`~advisor.core.vocabulary.Precision` value); ``sharded_base`` (ZeRO-3 / FSDP shard the base) stores the 4-bit
    weights in the compute dtype."""
    compute = COMPUTE_DTYPES[Precision.of(precision)]
    kwargs: dict[str, Any] = {
        "load_in_4bit": True,
        "bnb_4bit_quant_type": "nf4",
        "bnb_4bit_use_double_quant": double_quant,
        "bnb_4bit_compute_dtype": compute,
    }
    if sharded_base:
        kwargs["bnb_4bit_quant_storage"] = compute
    return kwargs
