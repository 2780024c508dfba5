"""GEMM efficiency by shape and GPU: a roofline over the step's matmul shapes.

A GEMM of m x k by k x n does 2·m·k·n FLOPs and, at the least, reads its two operands and writes its result once:
2·(m·k + k·n + m·n) bytes in 16-bit. Its time is bounded below by both the tensor cores and the memory
(Williams et al. 2009, "Roofline: an insightful visual performance model", https://doi.org/10.1145/1498765.1498785;
NVIDIA "GPU Performance Background User's Guide", "Understanding Performance",
https://docs.nvidia.com/deeplearning/performance/dl-performance-gpu-background/index.html, which tabulates the
arithmetic intensity of typical layers against the ridge point, the peak FLOP/s over the bandwidth: about 139-153
FLOP/B on the A100 and 295 on the H100 SXM at 16-bit). Summing the two times, a smooth roofline, a GEMM reaches
``top / (1 + top · ridge / intensity)`` of the peak: a 4096-wide layer over 512 tokens (intensity 410 FLOP/B) is
near the ridge on an H100 and well above it on an A100, and a skinny GEMM (few tokens, or a mixture of experts'
expert under the per-expert loop, which sees tokens·k/E rows) is memory-bound everywhere. The shapes are the blocks'
linear layers and the LM head; the only constants are the datasheet rates and the shares of them the speed model
already carries (``speed.TENSOR16_TOP``, ``speed.BANDWIDTH_SHARE``).
"""

from __future__ import annotations

from functools import lru_cache

from probes.model import ModelProfile
from advisor.core.vocabulary import Family, Task


def gemm_shapes(
    model: ModelProfile, tokens: int, experts: bool = True, split: int = 1
) -> list[tuple[float, int, int, int]]:
    """(m, k, n, how many) of the forward matmuls of one micro-batch of ``tokens`` rows (the backward's two GEMMs a
    layer have the same three sizes); a MoE block's routed experts each see tokens·k/E rows (its capacity factor
    pads them), of a width ffn_size / (k + shared experts); ``experts=False`` leaves the routed experts out (the
    dense layers' roofline: :mod:`advisor.engine.experts` prices the routed experts' GEMMs apart).

    ``split``: the tensor-parallel degree t. Each rank runs its 1/t of every layer's heads and MLP width (the
    column-parallel q, k, v, up / gate and the row-parallel o and down of Megatron-LM, Shoeybi et al. 2019,
    https://arxiv.org/abs/1909.08053 sec. 3; torchtitan's ColwiseParallel / RowwiseParallel plan), key / value heads
    fewer than t replicated (one head a rank at least), and the vocabulary-parallel LM head 1/t of the vocabulary."""
    t = max(split, 1)
    h, inner = model.hidden_size, model.num_attention_heads * model.head_dim // t
    kv = max(model.num_key_value_heads // t, 1) * model.head_dim
    blocks = model.encoder_layers + model.decoder_layers * (2 if model.family == Family.ENCODER_DECODER else 1)
    shapes: list[tuple[float, int, int, int]] = [
        (tokens, h, inner, blocks),
        (tokens, h, kv, 2 * blocks),
        (tokens, inner, h, blocks),
    ]
    f, up = model.ffn_size // t, 2 if model.gated_mlp else 1
    dense = model.num_layers - model.moe_layers
    if dense:
        shapes += [(tokens, h, f, up * dense), (tokens, f, h, dense)]
    if model.moe_layers and model.num_experts:
        k = max(model.experts_per_token, 1)
        width = expert_width(model, t)
        rows = tokens * k * (model.capacity_factor or 1.0) / model.num_experts
        if experts:
            count = model.num_experts * model.moe_layers
            shapes += [(rows, h, width, up * count), (rows, width, h, count)]
        if model.shared_experts:
            shapes += [
                (tokens, h, width * model.shared_experts, up * model.moe_layers),
                (tokens, width * model.shared_experts, h, model.moe_layers),
            ]
    if Task.of(model.task).language_modeling:
        shapes.append((tokens, h, _head_columns(model, t), 1))
    return shapes


def expert_width(model: ModelProfile, split: int = 1) -> int:
    """One routed expert's width on a tensor-parallel rank (``split``: its degree), elements: the width a token
    passes through (``ffn_size``, its k routed and the shared experts') over k + shared experts, at least 1."""
    k = max(model.experts_per_token, 1)
    return max(model.ffn_size // max(split, 1) // (k + model.shared_experts), 1)


def _head_columns(model: ModelProfile, split: int) -> int:
    """The LM head's output columns on one rank of a vocabulary-parallel head over ``split`` ranks (rounded up)."""
    return -(-model.vocab_size // max(split, 1))


#: Streaming multiprocessors per catalog GPU (NVIDIA's architecture whitepapers: Volta
#: https://images.nvidia.com/content/volta-architecture/pdf/volta-architecture-whitepaper.pdf, Turing
#: https://images.nvidia.com/aem-dam/en-zz/Solutions/design-visualization/technologies/turing-architecture/NVIDIA-Turing-Architecture-Whitepaper.pdf,
#: A100 https://images.nvidia.com/aem-dam/en-zz/Solutions/data-center/nvidia-ampere-architecture-whitepaper.pdf,
#: GA102 https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf, Ada
#: https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf, Hopper
#: https://resources.nvidia.com/en-us-tensor-core/gtc22-whitepaper-hopper: the shipped products' SM counts). A GPU
#: missing here (the A10G, whose SM count NVIDIA does not publish) is priced without the fill below.
SMS = {
    "v100-16gb": 80,
    "v100-32gb": 80,
    "t4": 40,
    "titan-rtx": 72,
    "rtx-3090": 82,
    "rtx-4090": 128,
    "rtx-a6000": 84,
    "l4": 58,
    "l40s": 142,
    "a100-40gb": 108,
    "a100-80gb": 108,
    "a100-40gb-pcie": 108,
    "a100-80gb-pcie": 108,
    "h100-sxm": 132,
    "h100-pcie": 114,
    "h200": 132,
}
#: The output tile of one thread block of a cuBLAS / CUTLASS tensor-core GEMM, elements (128 x 128: the guide's
#: "Dimension Quantization Effects" section works with 256 x 128 and 128 x 128 tiles).
TILE = 128


def _fill(rows: float, cols: int, sms: int | None) -> float:
    """The share of the SMs a GEMM with a ``rows`` x ``cols`` output keeps busy: its tiles over the SMs when they
    are fewer ("Wave Quantization", NVIDIA Matrix Multiplication Background User's Guide,
    https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/index.html), else 1 (the
    tail of later waves is left out: cuBLAS picks tiles and split-K to balance them)."""
    if not sms:
        return 1.0
    tiles = max(-(-rows // TILE), 1) * max(-(-cols // TILE), 1)
    return min(tiles / sms, 1.0)


def roofline_share(
    model: ModelProfile,
    tokens: int,
    top: float,
    ridge: float,
    sms: int | None = None,
    width: float = 2.0,
    experts: bool = True,
    split: int = 1,
) -> float:
    """The fraction of the peak the step's matmuls reach together, at most ``top``: Σ FLOPs / peak over
    Σ (FLOPs / (peak · top · fill) + bytes / usable bandwidth), as a multiple of the peak. Each layer runs three
    GEMMs of equal FLOPs (the forward's, ∂x's and ∂W's), whose outputs are tokens x d_out, tokens x d_in and
    d_in x d_out: a short micro-batch leaves the first two with too few tiles to fill the SMs (:func:`_fill`).

    Args:
        tokens: rows of one micro-batch (micro-batch × sequence length).
        top: the share of the peak large GEMMs reach (``speed.TENSOR16_TOP``).
        ridge: the GPU's peak FLOP/s over its usable bandwidth (bytes/s × ``speed.BANDWIDTH_SHARE``), FLOP/B.
        sms: the GPU's streaming multiprocessors (:data:`SMS`; None: every GEMM fills them).
        width: bytes an element of the operands (2: 16-bit).
        experts: with the routed experts' shapes (False: the dense layers alone, as the speed model prices them).
        split: the tensor-parallel degree (:func:`gemm_shapes`): one rank's shapes.
    Returns:
        a share of the peak in (0, top].
    """
    return _share(tuple(gemm_shapes(model, tokens, experts, split)), top, ridge, sms, width)


@lru_cache(maxsize=4096)
def _share(
    shapes: tuple[tuple[float, int, int, int], ...], top: float, ridge: float, sms: int | None, width: float
) -> float:
    """:func:`roofline_share` of the given shapes (cached: the search prices many plans of one model)."""
    flops = compute = moved = 0.0
    for m, k, n, c in shapes:
        f = 2.0 * m * k * n * c
        flops += f
        compute += f / top * (1 / _fill(m, n, sms) + 1 / _fill(m, k, sms) + 1 / _fill(k, n, sms)) / 3
        moved += width * (m * k + k * n + m * n) * c
    if not flops:
        return top
    return flops / (compute + moved * ridge)


#: Bytes one dynamic fp8 cast moves per element cast: its absolute maximum read (2 B of 16-bit), then the scaled
#: cast reading it again and writing one byte (torchao ``float8/float8_scaling_utils.py``
#: ``hp_tensor_to_float8_dynamic``: ``tensor_to_scale`` (amax) then ``hp_tensor_and_scale_to_float8``; Transformer
#: Engine "Using FP8 with Transformer Engine", delayed / current scaling,
#: https://docs.nvidia.com/deeplearning/transformer-engine/user-guide/examples/fp8_primer.html). Counted, not fitted.
FP8_CAST_BYTES = 5.0


#: Transformer Engine's casts (Megatron / NeMo): the input's cast is fused into the kernel that produces it
#: (``LayerNormLinear`` / ``LayerNormMLP`` write the norm's and the activation's output in fp8), the output gradient's
#: cast and transpose are one kernel reading 2 B and writing 1 + 1 B, with the scale from the amax history (delayed
#: scaling: no separate amax pass), and the weights are cast once per optimizer step and cached across its
#: micro-batches (``is_first_microbatch``; Transformer Engine PyTorch API, ``te.Linear.forward``,
#: https://docs.nvidia.com/deeplearning/transformer-engine/user-guide/api/pytorch.html; FP8 primer above). Bytes per
#: element of the gradient's and of the weights' casts; counted, not fitted.
TE_GRAD_CAST_BYTES, TE_WEIGHT_CAST_BYTES = 4.0, 3.0


def fp8_speedup(
    model: ModelProfile,
    tokens: int,
    top: float,
    ridge: float,
    sms: int | None = None,
    fused_casts: bool = False,
    micro_batches: int = 1,
    split: int = 1,
) -> float:
    """How much faster the blocks' linear layers run in fp8 than in 16-bit (LM head and routed experts excluded: they
    stay 16-bit), from the roofline of their shapes at each precision.

    fp8 tensor cores run at twice the 16-bit rate (Hopper whitepaper; Ada's fourth-generation tensor cores), so a
    GEMM's compute halves while its 1-byte operands halve the bytes its inputs move (the output stays 16-bit). Each
    layer also casts, per micro-batch (torchao ``float8/float8_linear.py`` ``matmul_with_hp_or_float8_args``: the
    forward casts the input and the weight; the backward casts the output's gradient and casts the saved 16-bit input
    and weight again for the two backward GEMMs): 2·m·k + 2·k·n + m·n elements at :data:`FP8_CAST_BYTES` each; under
    Transformer Engine (``fused_casts``) only the output's gradient (m·n at :data:`TE_GRAD_CAST_BYTES`) and the
    weights once per step (2·k·n / ``micro_batches`` at :data:`TE_WEIGHT_CAST_BYTES`). Small GEMMs (short
    micro-batches, narrow layers) gain little: their casts and bytes weigh as much as the halved compute.

    Args:
        tokens: rows of one micro-batch; top, ridge, sms: as :func:`roofline_share` (the 16-bit ridge point, FLOP/B).
        fused_casts: Transformer Engine's fused casts and cached weights (Megatron-style code), else torchao's.
        micro_batches: micro-batches per optimizer step (the cached weights' casts are shared by them).
        split: the tensor-parallel degree (:func:`gemm_shapes`): one rank's shapes.
    Returns:
        the 16-bit time over the fp8 time (> 0; 1 when the model has no such layers).
    """
    head = _head_columns(model, split)
    shapes = tuple(s for s in gemm_shapes(model, tokens, False, split) if s[2] != head or s[3] != 1)
    return _fp8_ratio(shapes, top, ridge, sms, fused_casts, max(micro_batches, 1))


@lru_cache(maxsize=4096)
def _fp8_ratio(
    shapes: tuple[tuple[float, int, int, int], ...],
    top: float,
    ridge: float,
    sms: int | None,
    fused_casts: bool,
    micro_batches: int,
) -> float:
    """:func:`fp8_speedup` of the given shapes (cached)."""
    sixteen = eight = 0.0
    for m, k, n, c in shapes:  # a layer's three GEMMs (the forward's, ∂x's, ∂W's), in units of 1 / the 16-bit peak
        compute = 2.0 * m * k * n * c / top * (1 / _fill(m, n, sms) + 1 / _fill(m, k, sms) + 1 / _fill(k, n, sms))
        sixteen += compute + 3 * 2.0 * (m * k + k * n + m * n) * c * ridge
        if fused_casts:
            casts = (TE_GRAD_CAST_BYTES * m * n + TE_WEIGHT_CAST_BYTES * 2 * k * n / micro_batches) * c
        else:
            casts = FP8_CAST_BYTES * (2 * m * k + 2 * k * n + m * n) * c
        eight += compute / 2 + 3 * ((m * k + k * n) + 2.0 * m * n) * c * ridge + casts * ridge
    return sixteen / eight if eight else 1.0
