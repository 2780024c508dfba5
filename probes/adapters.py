"""What LoRA and QLoRA add and take away: adapter parameters, 4-bit base weights.

LoRA (Hu et al. 2021, https://arxiv.org/abs/2106.09685 sec. 4.1) trains, beside each targeted frozen
linear layer W (d_out x d_in), the product B·A of A (r x d_in) and B (d_out x r): r·(d_in + d_out)
parameters per layer. QLoRA (Dettmers et al. 2023, https://arxiv.org/abs/2305.14314 sec. 3) stores
the frozen linear weights of the blocks in 4-bit NormalFloat with blocks of 64 and double-quantizes
the blocks' fp32 absmax constants to 8 bits with a second-level fp32 constant per 256 blocks:
4 + 8/64 + 32/(64·256) = 4.127 bits per parameter; without double quantization (transformers'
``BitsAndBytesConfig`` default, LitGPT's ``bnb.nf4``) each block keeps its fp32 absmax: 4 + 32/64 = 4.5 bits.
bitsandbytes leaves the embedding and the output head unquantized (``BitsAndBytesConfig.llm_int8_skip_modules``;
transformers skips ``lm_head``).

On a mixture of experts, all-linear reaches the routed experts too: transformers 5 stores each block's experts as two
3-D parameters (``experts.gate_up_proj`` E x 2f x h, ``experts.down_proj`` E x h x f) and the router as a module with a
``weight`` parameter, none of them ``nn.Linear``, so PEFT adapts them through ``target_parameters`` (PEFT >= 0.17,
``lora.ParamWrapper``: an adapter pair per expert, ``lora_A`` (r·E x d_in), ``lora_B`` (d_out x r·E), i.e. r·E·(d_in +
d_out) parameters per 3-D tensor). PEFT 0.21 does so on its own for the model types it converts from transformers 4
(``peft/utils/transformers_weight_conversion.py``: ``_MOE_TARGET_MODULE_MAPPING``, ``_MOE_FUSED_TARGETS``), giving the
fused ``gate_up_proj`` rank 2r and alpha 2·alpha (r for each of the gate and up projections it fuses, as their
separate adapters had); :mod:`probes.lora_config` writes the same targets and patterns for every MoE type, so that the
count below holds whatever PEFT converts. The same conversion moves the dense blocks' and shared experts'
``gate_proj`` / ``up_proj`` / ``down_proj`` out of ``target_modules``: they get no adapters (on Qwen2-MoE, which it
does not convert, they do: left out of this count, a few percent of the adapters).

Known approximations: a fused projection (GPT-2's ``c_attn``, one r·(h + 3h) adapter; Phi-3's ``qkv_proj`` and
``gate_up_proj``) is counted as its parts (r·(3h + 3h)), within r·2h per layer; bias vectors stay unquantized (a few parameters).
"""

from __future__ import annotations

from probes.model import ModelProfile
from advisor.core.vocabulary import Family, LoraTargets, Task

#: bytes per NF4 parameter with double quantization (QLoRA sec. 3, "Double Quantization")
NF4_BYTES_PER_PARAM = (4 + 8 / 64 + 32 / (64 * 256)) / 8
#: bytes per NF4 parameter without double quantization: an fp32 absmax per block of 64 (QLoRA sec. 3)
NF4_PLAIN_BYTES_PER_PARAM = (4 + 32 / 64) / 8


def nf4_bytes_per_param(double_quant: bool = True) -> float:
    """Bytes per 4-bit NF4 parameter, its quantization constants included (module docstring)."""
    return NF4_BYTES_PER_PARAM if double_quant else NF4_PLAIN_BYTES_PER_PARAM


#: The rank multiplier of the fused gate and up projections of a routed expert (module docstring: PEFT's conversion)
GATE_UP_RANK_FACTOR = 2


def expert_width(model: ModelProfile) -> int:
    """The MLP inner width f of one routed expert (0 for a dense model): its routed parameters over the MoE blocks,
    experts, matrices (3 gated, 2 not) and the hidden size."""
    if not model.num_experts or not model.moe_layers:
        return 0
    matrices = 3 if model.gated_mlp else 2
    return model.routed_parameters // (model.moe_layers * model.num_experts * matrices * model.hidden_size)


def adapts_experts(model: ModelProfile, targets: str) -> bool:
    """Whether ``targets`` put adapters on the routed experts (all-linear on a mixture of experts)."""
    return LoraTargets.of(targets) is LoraTargets.ALL_LINEAR and expert_width(model) > 0


def _projections(model: ModelProfile, targets: str) -> list[tuple[int, int, int, int]]:
    """(d_in, d_out, how many, stacked) of the targeted weights in all blocks: ``stacked`` adapter pairs share one
    lora_A (r·stacked x d_in) and lora_B (d_out x r·stacked): 1 for a linear layer, E (x 2 for the fused gate and up
    projections' doubled rank) for a block's routed experts (module docstring)."""
    h, inner = model.hidden_size, model.num_attention_heads * model.head_dim
    kv = model.num_key_value_heads * model.head_dim
    attention_blocks = model.encoder_layers + model.decoder_layers * (
        2 if model.family == Family.ENCODER_DECODER else 1
    )
    if targets == LoraTargets.QUERY_VALUE:
        return [(h, inner, attention_blocks, 1), (h, kv, attention_blocks, 1)]
    out = [(h, inner, attention_blocks, 1), (h, kv, 2 * attention_blocks, 1), (inner, h, attention_blocks, 1)]
    if adapts_experts(model, targets):
        # the routers (h x E) and each MoE block's routed experts (shared experts' and dense blocks' MLPs: none)
        e, f, blocks = model.num_experts, expert_width(model), model.moe_layers
        gate_up = (2 if model.gated_mlp else 1) * f
        out += [
            (h, e, blocks, 1),
            (h, gate_up, blocks, GATE_UP_RANK_FACTOR * e if model.gated_mlp else e),
            (f, h, blocks, e),
        ]
    elif targets == LoraTargets.ALL_LINEAR:
        f = model.ffn_size
        out += [(h, f, (2 if model.gated_mlp else 1) * model.num_layers, 1), (f, h, model.num_layers, 1)]
    if targets == LoraTargets.ALL_LINEAR and model.family == Family.ENCODER_ONLY and model.task == Task.MASKED_LM:
        # PEFT's all-linear skips only the output embedding: a masked-LM head's h x h transform before it gets an
        # adapter too (BERT cls.predictions.transform.dense, RoBERTa lm_head.dense, DistilBERT vocab_transform;
        # PEFT tuners_utils._maybe_include_all_linear_layers)
        out.append((h, h, 1, 1))
    return out


def adapter_parameters(model: ModelProfile, rank: int, targets: str) -> int:
    """Trainable LoRA parameters: r·(d_in + d_out) for every targeted linear layer of the blocks, r·E·(d_in + d_out)
    for a block's routed experts (2r on the fused gate and up projections; module docstring).

    Args:
        rank: the adapters' rank r.
        targets: a :class:`advisor.core.vocabulary.LoraTargets` value ('all-linear', 'attention' or 'q-v').
    Returns:
        parameters (elements).
    """
    return sum(rank * stacked * (d_in + d_out) * n for d_in, d_out, n, stacked in _projections(model, targets))


def adapter_parameters_in_matrices_of(model: ModelProfile, rank: int, targets: str, min_elements: int) -> int:
    """The part of :func:`adapter_parameters` held in adapter matrices (each ``lora_A`` of r·stacked x d_in, each
    ``lora_B`` of d_out x r·stacked elements) of at least ``min_elements`` elements. Returns: parameters (elements)."""
    return sum(
        n * sum(e for e in (rank * stacked * d_in, rank * stacked * d_out) if e >= min_elements)
        for d_in, d_out, n, stacked in _projections(model, targets)
    )


def expert_adapter_parameters(model: ModelProfile, rank: int, targets: str) -> int:
    """The part of :func:`adapter_parameters` on the routed experts (0 when ``targets`` do not reach them).
    Returns: parameters (elements)."""
    return sum(
        rank * stacked * (d_in + d_out) * n for d_in, d_out, n, stacked in _projections(model, targets) if stacked > 1
    )


def adapter_full_rank(model: ModelProfile, targets: str) -> int:
    """The largest useful LoRA rank: the update B·A of a d_out x d_in layer has rank at most min(d_in, d_out) (Hu et
    al. 2021 sec. 4.1, r << min(d, k)), so beyond the largest such bound of the targeted layers a higher r adds
    parameters and memory but no capacity. Returns: a rank (dimensions, elements)."""
    return max(min(d_in, d_out) for d_in, d_out, _, _ in _projections(model, targets))


def adapter_matrix_elements(model: ModelProfile, rank: int, targets: str) -> int:
    """Elements of the largest adapter matrix (its gradient and update temporaries): r·stacked·max(d_in, d_out)."""
    return max(rank * stacked * max(d_in, d_out) for d_in, d_out, _, stacked in _projections(model, targets))


def head_matmul_parameters(model: ModelProfile) -> int:
    """Matmul parameters of the output head over the vocabulary (0 for other heads): left unquantized."""
    return model.vocab_size * model.hidden_size if Task.of(model.task).language_modeling else 0


def quantized_parameters(model: ModelProfile) -> int:
    """Parameters QLoRA stores in 4-bit: the blocks' linear weights (every matmul weight but the output head)."""
    return max(model.matmul_parameters - head_matmul_parameters(model), 0)


def largest_block_matrix(model: ModelProfile) -> int:
    """Elements of the largest linear weight inside a block (the one a 4-bit layer dequantizes at a time)."""
    inner = model.num_attention_heads * model.head_dim
    return max(model.hidden_size * model.ffn_size, model.hidden_size * inner)


def frozen_base_bytes(model: ModelProfile, quantized_base: bool, weight_bytes: int, double_quant: bool = True) -> int:
    """Bytes of the frozen base weights of a LoRA / QLoRA plan: every parameter in the weights' dtype
    (``weight_bytes`` per element), or under QLoRA the blocks' linear weights in NF4 (:func:`nf4_bytes_per_param`,
    double-quantized or not) and the rest in the weights' dtype. A mixture of experts' routed experts count as NF4, as
    transformers 4's per-expert linear layers were quantized (the published QLoRA Mixtral runs); transformers 5's 3-D
    expert parameters are not ``nn.Linear`` and bitsandbytes leaves them 16-bit (:func:`unquantized_expert_bytes`)."""
    quantized = quantized_parameters(model) if quantized_base else 0
    return int(quantized * nf4_bytes_per_param(double_quant)) + (model.num_parameters - quantized) * weight_bytes


def unquantized_expert_bytes(model: ModelProfile, weight_bytes: int, double_quant: bool = True) -> int:
    """Bytes a QLoRA base holds beyond :func:`frozen_base_bytes` under transformers 5: bitsandbytes' 4-bit loading
    quantizes the parameters of ``bnb.nn.Linear4bit`` layers only (``quantizers/quantizer_bnb_4bit.py``:
    ``param_needs_quantization``), which replace ``nn.Linear`` layers, so a mixture of experts' 3-D routed experts load
    in the weights' dtype (``weight_bytes`` per element) instead of NF4. 0 for a dense model."""
    return int(model.routed_parameters * (weight_bytes - nf4_bytes_per_param(double_quant)))
