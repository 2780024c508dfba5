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


def _projections(model: ModelProfile, targets: str) -> list[tuple[int, int, int]]:
    """(d_in, d_out, how many) of the targeted linear layers in all blocks."""
    h, inner = model.hidden_size, model.num_attention_heads * model.head_dim
    kv = model.num_key_value_heads * model.head_dim
    attention_blocks = model.encoder_layers + model.decoder_layers * (2 if model.family == Family.ENCODER_DECODER else 1)
    if targets == LoraTargets.QUERY_VALUE:
        return [(h, inner, attention_blocks), (h, kv, attention_blocks)]
    out = [(h, inner, attention_blocks), (h, kv, 2 * attention_blocks), (inner, h, attention_blocks)]
    if targets == LoraTargets.ALL_LINEAR and model.num_experts:
        # transformers 5 fuses each block's routed experts into 3-D parameters, which PEFT's all-linear (nn.Linear
        # layers only) does not target: the adapters sit on attention and the routers (shared experts' and dense
        # blocks' MLPs are left out of this count: a few percent of the adapters)
        out.append((h, model.num_experts, model.moe_layers))
    elif targets == LoraTargets.ALL_LINEAR:
        f = model.ffn_size
        out += [(h, f, (2 if model.gated_mlp else 1) * model.num_layers), (f, h, model.num_layers)]
    if targets == LoraTargets.ALL_LINEAR and model.family == Family.ENCODER_ONLY and model.task == Task.MASKED_LM:
        # PEFT's all-linear skips only the output embedding: a masked-LM head's h x h transform before it gets an
        # adapter too (BERT cls.predictions.transform.dense, RoBERTa lm_head.dense, DistilBERT vocab_transform;
        # PEFT tuners_utils._maybe_include_all_linear_layers)
        out.append((h, h, 1))
    return out


def adapter_parameters(model: ModelProfile, rank: int, targets: str) -> int:
    """Trainable LoRA parameters: r·(d_in + d_out) for every targeted linear layer of the blocks.

    Args:
        rank: the adapters' rank r.
        targets: a :class:`advisor.core.vocabulary.LoraTargets` value ('all-linear', 'attention' or 'q-v').
    Returns:
        parameters (elements).
    """
    return sum(rank * (d_in + d_out) * n for d_in, d_out, n in _projections(model, targets))


def adapter_full_rank(model: ModelProfile, targets: str) -> int:
    """The largest useful LoRA rank: the update B·A of a d_out x d_in layer has rank at most min(d_in, d_out) (Hu et
    al. 2021 sec. 4.1, r << min(d, k)), so beyond the largest such bound of the targeted layers a higher r adds
    parameters and memory but no capacity. Returns: a rank (dimensions, elements)."""
    return max(min(d_in, d_out) for d_in, d_out, _ in _projections(model, targets))


def adapter_matrix_elements(model: ModelProfile, rank: int, targets: str) -> int:
    """Elements of the largest adapter matrix (its gradient and update temporaries)."""
    return max(rank * max(d_in, d_out) for d_in, d_out, _ in _projections(model, targets))


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
    double-quantized or not) and the rest in the weights' dtype."""
    quantized = quantized_parameters(model) if quantized_base else 0
    return int(quantized * nf4_bytes_per_param(double_quant)) + (model.num_parameters - quantized) * weight_bytes
