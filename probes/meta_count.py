"""Fallback for architectures without a closed form: let transformers build the model on the
meta device (no memory, no weights) and read its parameters.

``torch.device("meta")`` is used rather than accelerate's ``init_empty_weights()`` with default
arguments, which leaves embeddings untied and overcounts (gpt2: 163M instead of 124,439,808).
Imports torch and transformers, so it is off the fast path.
"""

from __future__ import annotations

from typing import Callable

from probes.architectures import ParamGroup, Shape
from probes.errors import BadConfigError
from probes.vocabulary import Family, Task


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
                         default_task: Callable) -> tuple[Shape, str, bool]:
    """Build the model from ``config`` on the meta device.

    Returns:
        (shape, family, supports_gradient_checkpointing)
    Raises:
        BadConfigError: transformers does not know the model type, or cannot build it.
    """
    import torch
    import transformers

    cfg_dict = dict(config)
    model_type = cfg_dict.pop("model_type")
    try:
        hf_config = transformers.AutoConfig.for_model(model_type, **cfg_dict)
    except (ValueError, KeyError, TypeError) as exc:
        raise BadConfigError(f"transformers does not know model_type '{model_type}': {exc}") from None
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
        raise BadConfigError(f"transformers cannot build '{model_type}' for {chosen}: {exc}") from None
    groups: list[ParamGroup] = []
    matmul_ids = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Linear)}
    out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if out is not None and getattr(out, "weight", None) is not None:
        matmul_ids.add(id(out.weight))
    for name, p in model.named_parameters():  # named_parameters() yields a tied tensor once
        groups.append(ParamGroup(name, tuple(p.shape), 1, matmul=id(p) in matmul_ids))
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
    return shape, family, bool(getattr(model, "supports_gradient_checkpointing", False))
