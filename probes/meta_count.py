"""Fallback for architectures without a closed form: let transformers build the model on the
meta device (no memory, no weights) and read its parameters.

``torch.device("meta")`` is used rather than accelerate's ``init_empty_weights()`` with default
arguments, which leaves embeddings untied and overcounts (gpt2: 163M instead of 124,439,808).
Imports torch and transformers, so it is off the fast path.
"""

from __future__ import annotations

from typing import Callable

from advisor.core.kernels import supported_attention
from probes.shapes import ParamGroup, Shape, capacity_factor
from advisor.core.errors import BadConfigError
from advisor.core.text import shown
from advisor.core.extras import require
from advisor.core.vocabulary import Family, Task


def _first(config, *names, default=None):
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    return default


#: Parameter names of a gated MLP's gate (transformers' Llama / Gemma / Qwen ``gate_proj``, fused ``gate_up_proj``,
#: Mixtral's ``w3``, T5 v1.1's ``wi_0``): the structure says it, whatever the activation (Gemma gates a GELU).
_GATE_NAMES = ("gate_proj", "gate_up_proj", ".w3.", ".wi_0.")


def _gated(groups: list[ParamGroup]) -> bool:
    """Whether the built model's MLP is gated (three matrices), read from its parameter names."""
    return any(marker in g.name for g in groups for marker in _GATE_NAMES)


def shape_on_meta_device(config: dict, task: str | None, num_labels: int,
                         default_task: Callable) -> tuple[Shape, str, bool, list[str]]:
    """Build the model from ``config`` on the meta device.

    Returns:
        (shape, family, supports_gradient_checkpointing, the attention implementations its class runs:
        :func:`advisor.core.kernels.supported_attention` of its ``_supports_sdpa`` / ``_supports_flash_attn`` flags)
    Raises:
        BadConfigError: transformers does not know the model type, or cannot build it. MissingExtraError: torch or
            transformers is not installed (the 'trial' extra).
    """
    require("trial", f"a '{config.get('model_type')}' model (no closed form in advisor: counted on the meta device)")
    import torch
    import transformers

    cfg_dict = dict(config)
    model_type = cfg_dict.pop("model_type")
    hf_config = _hf_config(model_type, cfg_dict)
    if getattr(hf_config, "is_encoder_decoder", False):
        family = Family.ENCODER_DECODER
    elif any(str(a).endswith(("ForMaskedLM",)) for a in cfg_dict.get("architectures") or []):
        family = Family.ENCODER_ONLY
    else:
        family = Family.DECODER_ONLY
    chosen = task or default_task(cfg_dict, family)
    hf_config.num_labels = num_labels
    auto = getattr(transformers, Task(chosen).auto_class)
    try:
        with torch.device("meta"):
            model = auto.from_config(hf_config)
    except Exception as exc:
        raise BadConfigError(f"transformers cannot build '{shown(model_type)}' for {chosen}: {shown(exc)}") from None
    experts = _first(hf_config, "num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts", default=0)
    experts = experts if isinstance(experts, int) and experts > 1 else 0
    groups = _parameter_groups(model, experts)
    hidden = _first(hf_config, "hidden_size", "d_model", "n_embd", "dim", default=0)
    heads = _first(hf_config, "num_attention_heads", "n_head", "num_heads", "n_heads", default=1)
    layers = _first(hf_config, "num_hidden_layers", "n_layer", "num_layers", "n_layers", default=0)
    dec_layers = _first(hf_config, "num_decoder_layers", "decoder_layers", default=layers)
    enc_dec = family == Family.ENCODER_DECODER
    shape = Shape(
        family=family, layers=layers + (dec_layers if enc_dec else 0),
        encoder_layers=layers if family != Family.DECODER_ONLY else 0,
        decoder_layers=(dec_layers if enc_dec else layers) if family != Family.ENCODER_ONLY else 0,
        hidden=hidden, heads=heads, kv_heads=_first(hf_config, "num_key_value_heads", default=heads),
        head_dim=_first(hf_config, "head_dim", default=hidden // max(heads, 1)),
        ffn=_first(hf_config, "intermediate_size", "d_ff", "n_inner", "ffn_dim", "hidden_dim", default=4 * hidden),
        vocab=_first(hf_config, "vocab_size", default=0),
        max_positions=_first(hf_config, "max_position_embeddings", "n_positions", default=None),
        gated_mlp=_gated(groups) or str(_first(hf_config, "hidden_act", "activation_function", default="")) in {
            "silu", "swiglu"},
        tied_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
        groups=groups,
    )
    if any(g.routed for g in groups):
        _add_moe_facts(shape, hf_config, experts)
    return shape, family, bool(getattr(model, "supports_gradient_checkpointing", False)), _attention_kernels(model)


def _hf_config(model_type: str, cfg_dict: dict):
    """transformers' config object of ``model_type`` from the config.json's other keys.

    Raises:
        BadConfigError: transformers does not know the type, or its validation rejects a value (a ValueError,
            a TypeError, huggingface_hub's StrictDataclassError, ...).
    """
    import transformers

    if model_type not in transformers.CONFIG_MAPPING:
        raise BadConfigError(f"transformers does not know model_type '{shown(model_type)}'")
    try:
        return transformers.AutoConfig.for_model(model_type, **cfg_dict)
    except Exception as exc:
        first = str(exc).strip().splitlines()
        raise BadConfigError(f"transformers rejects this '{shown(model_type)}' config: "
                             f"{shown(' '.join(line.strip() for line in first[:2]), 400)}") from None


def _attention_kernels(model) -> list[str]:
    """The attention implementations the model's class declares (:func:`advisor.core.kernels.supported_attention`)."""
    flash = getattr(model, "_supports_flash_attn", None)
    flash = getattr(model, "_supports_flash_attn_2", False) if flash is None else flash  # transformers 4
    return supported_attention(bool(getattr(model, "_supports_sdpa", False)), bool(flash))


def _parameter_groups(model, experts: int) -> list[ParamGroup]:
    """One group per parameter tensor of ``model``; matmuls: linear weights, the output embedding, and in a
    mixture of ``experts`` experts the routed experts' matrices and the routers."""
    import torch

    matmul_ids = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Linear)}
    out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if out is not None and getattr(out, "weight", None) is not None:
        matmul_ids.add(id(out.weight))
    groups = []
    for name, p in model.named_parameters():  # named_parameters() yields a tied tensor once
        routed = bool(experts) and _is_routed(name)
        matmul = id(p) in matmul_ids or (routed and p.dim() >= 2) or (bool(experts) and _is_router(name, p, experts))
        groups.append(ParamGroup(name, tuple(p.shape), 1, matmul=matmul, routed=routed))
    return groups


def _is_routed(name: str) -> bool:
    """A routed expert's parameter: transformers names them ``….experts.gate_up_proj`` (fused, 5.x) or
    ``….experts.<i>.…`` / ``….experts.expert_<i>.…`` (one module per expert); shared experts are named
    ``shared_expert`` (Qwen-MoE) or ``shared_experts`` (DeepSeek)."""
    return ".experts." in name


def _is_router(name: str, p, experts: int) -> bool:
    """The router's (E, h) weight: a module named ``gate`` or ``router`` (Mixtral ``mlp.gate``, DeepSeek
    ``mlp.gate``, Switch ``router.classifier``) whose weight has one row per routed expert."""
    parts = name.split(".")
    return name.endswith("weight") and p.dim() == 2 and p.shape[0] == experts and ("gate" in parts or "router" in parts)


def _add_moe_facts(shape: Shape, hf_config, experts: int) -> None:
    """Fill the MoE fields of ``shape`` from the config and the routed parameters found.

    Top-k: the config's ``num_experts_per_tok`` (Mixtral, Qwen-MoE, DeepSeek) or ``num_experts_per_token``,
    else 1 (Switch Transformers' top-1 routing, Fedus et al. 2021, https://arxiv.org/abs/2101.03961 sec. 2.1).
    Shared experts: ``n_shared_experts`` (DeepSeek) / ``num_shared_experts``, else 1 per block when a
    ``shared_expert`` module exists (Qwen-MoE). ``ffn`` becomes the MLP width one token passes through in a
    MoE block: k routed experts' width (``moe_intermediate_size``, else the dense width) plus the shared ones'.
    """
    k = _first(hf_config, "num_experts_per_tok", "num_experts_per_token", default=1)
    blocks = {g.name.split(".experts.")[0] for g in shape.groups if g.routed}
    shared = _first(hf_config, "n_shared_experts", "num_shared_experts", default=None)
    if shared is None:
        shared = 1 if any(".shared_expert." in g.name for g in shape.groups) else 0
    width = _first(hf_config, "moe_intermediate_size", default=shape.ffn)
    shared_width = _first(hf_config, "shared_expert_intermediate_size", default=shared * width)
    shape.num_experts, shape.experts_per_token, shape.shared_experts = experts, k, shared
    shape.moe_layers, shape.ffn = len(blocks), k * width + shared_width
    shape.capacity_factor = capacity_factor({"capacity_factor": getattr(hf_config, "capacity_factor", None)})
