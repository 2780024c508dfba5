"""Closed-form shapes of the Llama-layout decoders: Llama, Mistral, Qwen2, Qwen3, Gemma (1, 2 and 3's text model),
Phi-3, and the mixture-of-experts Mixtral, Qwen-MoE and Qwen3-MoE (GQA attention, gated MLPs or experts, RMSNorm,
rotary positions).

Sources: transformers 5.23 ``modeling_llama.py``, ``modeling_mistral.py``, ``modeling_qwen2.py``,
``modeling_mixtral.py``, ``modeling_qwen2_moe.py``, 5.24 ``modeling_qwen3.py``, ``modeling_qwen3_moe.py``,
``modeling_gemma.py``, ``modeling_gemma2.py``, ``modeling_gemma3.py``, ``modeling_phi3.py`` and their configuration
classes, https://github.com/huggingface/transformers/tree/main/src/transformers/models
"""

from __future__ import annotations

from dataclasses import dataclass

from probes.shapes import ParamGroup, Shape, TaskName, capacity_factor, linear, norm, task_head, tied_head
from advisor.core.vocabulary import Family, Task


@dataclass(frozen=True)
class _Dims:
    """Attention sizes of a Llama-layout decoder (GQA attention, RMSNorm, rotary positions)."""

    h: int
    layers: int
    heads: int
    kv: int
    hd: int
    vocab: int


def _dims(cfg: dict, defaults: dict) -> _Dims:
    """Read the sizes, falling back to the config class's own defaults (``defaults``)."""
    get = lambda key: cfg.get(key, defaults[key])  # noqa: E731
    h, heads = get("hidden_size"), get("num_attention_heads")
    kv = cfg.get("num_key_value_heads") or defaults.get("num_key_value_heads") or heads
    hd = cfg.get("head_dim") or defaults.get("head_dim") or h // heads
    return _Dims(h, get("num_hidden_layers"), heads, kv, hd, get("vocab_size"))


def _attention(d: _Dims, qkv_bias: bool, o_bias: bool) -> list[ParamGroup]:
    groups = linear("layers.self_attn.q_proj", d.h, d.heads * d.hd, d.layers, bias=qkv_bias)
    groups += linear("layers.self_attn.kv_proj", d.h, d.kv * d.hd, 2 * d.layers, bias=qkv_bias)
    return groups + linear("layers.self_attn.o_proj", d.heads * d.hd, d.h, d.layers, bias=o_bias)


def _qk_norms(d: _Dims) -> list[ParamGroup]:
    """Qwen3's RMSNorms over each head's queries and keys (``q_norm``, ``k_norm``: head_dim weights each, shared by
    the heads; Qwen3 technical report, https://arxiv.org/abs/2505.09388 sec. 2: QK-Norm in place of QKV bias)."""
    return norm("layers.self_attn.qk_norms", d.hd, 2 * d.layers, bias=False)


def _swiglu(name: str, h: int, ffn: int, count: int, bias: bool = False) -> list[ParamGroup]:
    """``count`` SwiGLU MLPs: gate and up projections h → ffn, down projection ffn → h."""
    if count <= 0:
        return []
    gate_up = linear(f"{name}.gate_up_proj", h, ffn, 2 * count, bias=bias)
    return gate_up + linear(f"{name}.down_proj", ffn, h, count, bias=bias)


def _routed_experts(h: int, width: int, experts: int, router_count: int) -> list[ParamGroup]:
    """The router and the routed SwiGLU experts of ``router_count`` MoE blocks, as transformers 5.23 stores them.

    ``MixtralExperts`` / ``Qwen2MoeExperts`` hold all experts of a block in two fused 3-D parameters,
    ``gate_up_proj`` (E, 2·width, h) and ``down_proj`` (E, h, width); the router is a (E, h) weight. These
    are the tensors the optimizer steps, so they are the shapes kept here: the largest tensor is the fused
    gate_up (Mixtral: 8 × 28672 × 4096, 7x its embedding), and Adafactor factors each expert's trailing
    (rows, columns) matrix (transformers ``Adafactor``: row statistic shape[:-1], column shape[:-2] + shape[-1:]).
    """
    if router_count <= 0:
        return []
    return [
        ParamGroup("layers.mlp.gate.weight", (experts, h), router_count, matmul=True),
        ParamGroup("layers.mlp.experts.gate_up_proj", (experts, 2 * width, h), router_count, True, True),
        ParamGroup("layers.mlp.experts.down_proj", (experts, h, width), router_count, True, True),
    ]


def _moe_blocks(cfg: dict, layers: int, experts: int) -> int:
    """Blocks with a sparse MoE MLP under Qwen-MoE's rule: every ``decoder_sparse_step``-th block not in
    ``mlp_only_layers`` (transformers ``Qwen2MoeDecoderLayer``, ``Qwen3MoeDecoderLayer``)."""
    step, dense_only = cfg.get("decoder_sparse_step", 1), set(cfg.get("mlp_only_layers") or [])
    return sum(1 for i in range(layers) if i not in dense_only and experts > 0 and (i + 1) % step == 0)


def _decoder(
    cfg: dict,
    task: TaskName,
    num_labels: int,
    d: _Dims,
    blocks: list[ParamGroup],
    ffn: int,
    tied_default: bool = False,
    block_norms: int = 2,
    positions: int | None = None,
    **moe,
) -> Shape:
    """A Llama-layout decoder: embedding, ``blocks``, ``block_norms`` RMSNorms per block and a final one, the head
    (tied to the embedding as ``tie_word_embeddings`` says, else as the config class does: ``tied_default``;
    ``positions``: the config class's ``max_position_embeddings``)."""
    tied = cfg.get("tie_word_embeddings", tied_default)
    groups = [ParamGroup("embed_tokens.weight", (d.vocab, d.h))] + blocks
    groups += norm("layers.norms", d.h, block_norms * d.layers, bias=False) + norm("norm", d.h, bias=False)
    if task == Task.CAUSAL_LM and tied:
        groups = tied_head(groups, "embed_tokens.weight")
    elif task == Task.CAUSAL_LM:
        groups += linear("lm_head", d.h, d.vocab, bias=False)
    groups += task_head(task, d.h, num_labels, seq_cls_bias=False)
    return Shape(
        Family.DECODER_ONLY,
        d.layers,
        0,
        d.layers,
        d.h,
        d.heads,
        d.kv,
        d.hd,
        ffn,
        d.vocab,
        cfg.get("max_position_embeddings", positions),
        True,
        tied,
        groups,
        **moe,
    )


#: Defaults of the config classes (transformers 5.23 ``LlamaConfig``, ``Qwen2Config``, ``MixtralConfig``,
#: ``Qwen2MoeConfig``), used when a config.json leaves a size out.
_LLAMA = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 32000}
_QWEN2 = {
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "vocab_size": 151936,
}
_MIXTRAL = {
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
}
_QWEN3 = {
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "head_dim": 128,
    "vocab_size": 151936,
}  # Qwen3Config's head_dim is 128 whatever hidden / heads
_QWEN3_MOE = {
    "hidden_size": 2048,
    "num_hidden_layers": 24,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "vocab_size": 151936,
}
_GEMMA = {
    "hidden_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "head_dim": 256,
    "vocab_size": 256000,
    "intermediate_size": 24576,
    "max_position_embeddings": 8192,
}
_GEMMA2 = {
    "hidden_size": 2304,
    "num_hidden_layers": 26,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "vocab_size": 256000,
    "intermediate_size": 9216,
    "max_position_embeddings": 8192,
}
_GEMMA3_TEXT = {**_GEMMA2, "vocab_size": 262208, "max_position_embeddings": 131072}
_PHI3 = {
    "hidden_size": 3072,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "vocab_size": 32064,
    "intermediate_size": 8192,
    "max_position_embeddings": 4096,
}
_QWEN2_MOE = {
    "hidden_size": 2048,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "vocab_size": 151936,
}


def llama(cfg: dict, task: TaskName, num_labels: int) -> Shape:
    """Llama and Mistral (same parameter layout: GQA attention, SwiGLU MLP, RMSNorm)."""
    d, ffn = _dims(cfg, _LLAMA), cfg.get("intermediate_size", 11008)
    attn_bias, mlp_bias = cfg.get("attention_bias", False), cfg.get("mlp_bias", False)
    blocks = _attention(d, attn_bias, attn_bias) + _swiglu("layers.mlp", d.h, ffn, d.layers, mlp_bias)
    return _decoder(cfg, task, num_labels, d, blocks, ffn)


def qwen2(cfg: dict, task: TaskName, num_labels: int) -> Shape:
    """Qwen2 / Qwen2.5: the Llama layout with biases on the q, k and v projections (not on o)."""
    d, ffn = _dims(cfg, _QWEN2), cfg.get("intermediate_size", 22016)
    blocks = _attention(d, True, False) + _swiglu("layers.mlp", d.h, ffn, d.layers)
    return _decoder(cfg, task, num_labels, d, blocks, ffn)


def mixtral(cfg: dict, task: TaskName, num_labels: int) -> Shape:
    """Mixtral: the Mistral layout with every MLP a top-k mixture of SwiGLU experts (Jiang et al. 2024,
    https://arxiv.org/abs/2401.04088 sec. 2.1). ``ffn`` is the width a token passes through: k experts'."""
    d, width = _dims(cfg, _MIXTRAL), cfg.get("intermediate_size", 14336)
    experts, k = cfg.get("num_local_experts", 8), cfg.get("num_experts_per_tok", 2)
    blocks = _attention(d, False, False) + _routed_experts(d.h, width, experts, d.layers)
    return _decoder(
        cfg,
        task,
        num_labels,
        d,
        blocks,
        k * width,
        num_experts=experts,
        experts_per_token=k,
        moe_layers=d.layers,
        capacity_factor=capacity_factor(cfg),
    )


def qwen2_moe(cfg: dict, task: TaskName, num_labels: int) -> Shape:
    """Qwen1.5-MoE / Qwen2-MoE: the Qwen2 layout; MoE blocks (every ``decoder_sparse_step``-th, not in
    ``mlp_only_layers``) route each token to k of E narrow experts and add one shared expert scaled by a
    sigmoid gate (a (1, h) linear); the other blocks keep a dense MLP (Qwen blog "Qwen1.5-MoE",
    https://qwenlm.github.io/blog/qwen-moe/). ``ffn`` is the width a token passes through in a MoE block."""
    d = _dims(cfg, _QWEN2_MOE)
    experts, k = cfg.get("num_experts", 60), cfg.get("num_experts_per_tok", 4)
    width, shared = cfg.get("moe_intermediate_size", 1408), cfg.get("shared_expert_intermediate_size", 5632)
    moe_layers = _moe_blocks(cfg, d.layers, experts)
    dense_ffn = cfg.get("intermediate_size", 5632)
    blocks = _attention(d, cfg.get("qkv_bias", True), False)
    blocks += _swiglu("layers.mlp", d.h, dense_ffn, d.layers - moe_layers)
    if not moe_layers:
        return _decoder(cfg, task, num_labels, d, blocks, dense_ffn)
    blocks += _routed_experts(d.h, width, experts, moe_layers)
    blocks += _swiglu("layers.mlp.shared_expert", d.h, shared, moe_layers)
    blocks += linear("layers.mlp.shared_expert_gate", d.h, 1, moe_layers, bias=False)
    return _decoder(
        cfg,
        task,
        num_labels,
        d,
        blocks,
        k * width + shared,
        num_experts=experts,
        experts_per_token=k,
        shared_experts=1 if shared else 0,
        moe_layers=moe_layers,
        capacity_factor=capacity_factor(cfg),
    )


def qwen3(cfg: dict, task: TaskName, num_labels: int) -> Shape:
    """Qwen3 (dense): the Llama layout without biases (``attention_bias``, default off) and with QK-Norm."""
    d, ffn = _dims(cfg, _QWEN3), cfg.get("intermediate_size", 22016)
    bias = cfg.get("attention_bias", False)
    blocks = _attention(d, bias, bias) + _qk_norms(d) + _swiglu("layers.mlp", d.h, ffn, d.layers)
    return _decoder(cfg, task, num_labels, d, blocks, ffn)


def qwen3_moe(cfg: dict, task: TaskName, num_labels: int) -> Shape:
    """Qwen3-MoE: the Qwen3 layout; MoE blocks (every ``decoder_sparse_step``-th, not in ``mlp_only_layers``) route
    each token to k of E experts, with no shared expert (Qwen3 technical report, https://arxiv.org/abs/2505.09388
    sec. 2); the other blocks keep a dense MLP. ``ffn`` is the width a token passes through in a MoE block."""
    d = _dims(cfg, _QWEN3_MOE)
    experts, k = cfg.get("num_experts", 128), cfg.get("num_experts_per_tok", 8)
    width, dense_ffn = cfg.get("moe_intermediate_size", 768), cfg.get("intermediate_size", 6144)
    moe_layers = _moe_blocks(cfg, d.layers, experts)
    bias = cfg.get("attention_bias", False)
    blocks = _attention(d, bias, bias) + _qk_norms(d) + _swiglu("layers.mlp", d.h, dense_ffn, d.layers - moe_layers)
    if not moe_layers:
        return _decoder(cfg, task, num_labels, d, blocks, dense_ffn)
    blocks += _routed_experts(d.h, width, experts, moe_layers)
    return _decoder(
        cfg,
        task,
        num_labels,
        d,
        blocks,
        k * width,
        num_experts=experts,
        experts_per_token=k,
        moe_layers=moe_layers,
        capacity_factor=capacity_factor(cfg),
    )


def _gemma(cfg: dict, task: TaskName, num_labels: int, defaults: dict, qk_norm: bool, block_norms: int) -> Shape:
    """The Gemma layout: Llama's, with GeGLU MLPs (gate, up and down projections as SwiGLU's), the head tied to the
    embedding unless the config says otherwise, and (Gemma 2, 3) norms before and after each sub-layer."""
    d, ffn = _dims(cfg, defaults), cfg.get("intermediate_size", defaults["intermediate_size"])
    bias = cfg.get("attention_bias", False)
    blocks = _attention(d, bias, bias) + (_qk_norms(d) if qk_norm else []) + _swiglu("layers.mlp", d.h, ffn, d.layers)
    return _decoder(
        cfg,
        task,
        num_labels,
        d,
        blocks,
        ffn,
        tied_default=True,
        block_norms=block_norms,
        positions=defaults["max_position_embeddings"],
    )


def gemma(cfg: dict, task: TaskName, num_labels: int) -> Shape:
    """Gemma (Gemma Team 2024, https://arxiv.org/abs/2403.08295 sec. 2): multi-query or multi-head attention with
    256-wide heads, GeGLU, two RMSNorms per block, a 256k vocabulary whose embedding is the head."""
    return _gemma(cfg, task, num_labels, _GEMMA, qk_norm=False, block_norms=2)


def gemma2(cfg: dict, task: TaskName, num_labels: int) -> Shape:
    """Gemma 2 (Gemma Team 2024, https://arxiv.org/abs/2408.00118 sec. 2): Gemma's layout with GQA and four RMSNorms
    per block (before and after attention and the MLP)."""
    return _gemma(cfg, task, num_labels, _GEMMA2, qk_norm=False, block_norms=4)


def gemma3_text(cfg: dict, task: TaskName, num_labels: int) -> Shape:
    """Gemma 3's text model (``gemma3_text``: Gemma 3 1B, and the language model of the larger ones; Gemma Team
    2025, https://arxiv.org/abs/2503.19786 sec. 2): Gemma 2's layout with QK-Norm in place of soft-capping."""
    return _gemma(cfg, task, num_labels, _GEMMA3_TEXT, qk_norm=True, block_norms=4)


def phi3(cfg: dict, task: TaskName, num_labels: int) -> Shape:
    """Phi-3 and Phi-4 (``phi3``: Abdin et al. 2024, https://arxiv.org/abs/2404.14219 sec. 2): the Llama layout with
    the q, k and v projections fused into one ``qkv_proj`` and the gate and up projections into one
    ``gate_up_proj`` (the tensors the optimizer steps and Adafactor factors), no biases, an untied head."""
    d, ffn = _dims(cfg, _PHI3), cfg.get("intermediate_size", _PHI3["intermediate_size"])
    blocks = linear("layers.self_attn.qkv_proj", d.h, (d.heads + 2 * d.kv) * d.hd, d.layers, bias=False)
    blocks += linear("layers.self_attn.o_proj", d.heads * d.hd, d.h, d.layers, bias=False)
    blocks += linear("layers.mlp.gate_up_proj", d.h, 2 * ffn, d.layers, bias=False)
    blocks += linear("layers.mlp.down_proj", ffn, d.h, d.layers, bias=False)
    return _decoder(cfg, task, num_labels, d, blocks, ffn, positions=_PHI3["max_position_embeddings"])
