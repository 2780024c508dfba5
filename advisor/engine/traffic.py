"""The memory-bound traffic of one micro-batch: the bytes that a step's elementwise kernels read and write.

Every op that is not a matmul or an attention kernel (dtype casts, norms, activations, rotary embeddings, dropout,
residual adds, the loss, LoRA's scaling and sums, autocast's weight casts) reads its inputs and writes its output
through HBM, one kernel each in an eager step. ``benchmarks/calibrate_traffic.py`` counts those bytes op by op on
fake-tensor steps of each calibrated family and class of step (the columns of ``advisor/data/activations.json``) and
fits them, forward and backward apart, to :func:`traffic_features`; ``advisor/data/traffic.json`` holds the
coefficients. Counted this way an eager step of Llama-3.1-8B moves 2.8-5.0x the saved activations × (3 + r) that the
speed model priced before (``benchmarks/results/eager_traffic.md``), which was why the H100 trials ran 1.5x slower
than predicted.

Checkpointing recomputes the blocks' forward: their forward terms again, for the share of blocks (or, under op-level
selective checkpointing, every pointwise op of each block) it recomputes (:func:`recompute_share`). Liger's kernels
are counted too, for the families whose layout its stand-ins follow (``benchmarks/liger_standins.py``: each kernel
as one op reading and writing what it moves); their per-block traffic is 0.27 (full fine-tuning) to 0.61 (LoRA) of
eager Llama-2-7B's (16-bit weights). Where a fused step is not counted (torch.compile; Liger on other families) the traffic shrinks as what
the blocks save shrinks (the ratio of :func:`advisor.engine.memory.activation_traffic_bytes` with and without the
fusion: an assumption, not a count, since Inductor's and Triton's kernels do not run on fake tensors), with
:data:`COMPILE_ELEMENTWISE_TRAFFIC` on top under compile.

Families without columns and LitGPT's steps fall back to the saved activations × (3 + r) times the median ratio of
counted to that price over the calibrated columns (``traffic.json``'s ``_meta.fallback_ratio``: 3.3, over 186
columns, 1.5-8.6); Megatron's fused layers take the plain price, as the speed model took every step's before.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

from advisor.engine.calibration import calibration_keys
from advisor.engine.checkpointing import checkpointed_blocks, recompute_shares
from advisor.engine.gemm import expert_width
from advisor.engine.memory import activation_traffic_bytes
from probes.adapters import quantized_parameters
from advisor.core.kernels import Attention, Checkpointing, Framework, LossKernel
from probes.model import ModelProfile
from advisor.core.vocabulary import Family, Precision, Task
from advisor.core.dimensions import Setting
from advisor.core.plan import Plan

#: The names of :func:`traffic_features`, in order: the first :data:`LAYER_FEATURES` are per block (recomputed under
#: checkpointing)
FEATURES = ("L·sbh", "L·sbf", "L·p", "L·bnss", "sbh", "sbv", "v·h", "nss")
LAYER_FEATURES = 4


@lru_cache(maxsize=1)
def _table() -> dict:
    """The fitted traffic coefficients (benchmarks/calibrate_traffic.py)."""
    return json.loads(resources.files("advisor").joinpath("data/traffic.json").read_text(encoding="utf-8"))


def block_layers(model: ModelProfile) -> float:
    """The blocks the fit counts: a T5 encoder + decoder layer pair as one (as the activation columns do)."""
    return model.num_layers / 2 if model.family == Family.ENCODER_DECODER else float(model.num_layers)


def traffic_features(model: ModelProfile, micro_batch: int, seq_len: int) -> list[float]:
    """The shapes the traffic is linear in, in elements (:data:`FEATURES`): per block the s·b·h and s·b·ffn tensors,
    its matmul weights p (autocast's casts of fp32 weights and their gradients') and the b·heads·s² scores (a model
    that always runs eager attention: T5); once per step the embedding's and head's s·b·h, the logits' s·b·v (0
    without a language-modelling head), the embedding table v·h and a heads·s² position bias (T5's)."""
    layers = block_layers(model)
    sb, nss = seq_len * micro_batch, model.num_attention_heads * seq_len * seq_len
    per_block = quantized_parameters(model) / max(layers, 1)
    lm = Task.of(model.task).language_modeling
    return [
        layers * sb * model.hidden_size,
        layers * sb * model.ffn_size,
        layers * per_block,
        layers * micro_batch * nss,
        sb * model.hidden_size,
        sb * model.vocab_size if lm else 0.0,
        model.vocab_size * model.hidden_size,
        nss,
    ]


def recompute_share(model: ModelProfile, plan: Plan) -> float:
    """The share of the blocks' forward traffic the backward runs again: 0 without checkpointing, 1 under full and
    under op-level selective checkpointing (it saves matmul outputs and recomputes every pointwise op), the
    checkpointed blocks' share under layer-level."""
    if not plan.gradient_checkpointing:
        return 0.0
    if Checkpointing.of(plan.checkpointing) is Checkpointing.SELECTIVE_LAYER:
        return checkpointed_blocks(plan, model.num_layers) / max(model.num_layers, 1)
    return 1.0


#: Bytes Liger's fused linear cross-entropy moves per logit: a 16-bit write and read of each chunk's logits (the chunk's
#: matmul writes them, the cross-entropy kernel reads and overwrites them with their gradient in the forward;
#: Liger-Kernel ``src/liger_kernel/ops/fused_linear_cross_entropy.py``, Hsu et al. 2024, https://arxiv.org/abs/2410.10989
#: sec. 3.2), nothing in the backward: it takes the place of the counted head's s·b·v terms under ``--loss-kernel liger``.
#: Derived from what the kernel reads and writes, not fitted.
FLCE_BYTES_PER_LOGIT = 4.0

#: Mixtures of experts priced with their dense kin's columns: the same attention, norms and gated MLP, whose s·b·ffn
#: feature is the width a token passes through (its k routed experts'); the routing's gathers and scatters of the
#: tokens come on top (:func:`routing_traffic_bytes`)
DENSE_KIN = {"mixtral": "mistral", "qwen2_moe": "qwen2", "qwen3_moe": "qwen3"}
#: Bytes a MoE block's routing moves per micro-batch beyond its dense kin's column, per element of the S x h
#: token-expert rows and of the S x f expert activations (S = tokens x k; f: one expert's width), forward and
#: backward, in 16-bit activations: transformers 5.24's ``grouped_mm_experts_forward`` (``integrations/moe.py``)
#: sorts the S pairs by expert, gathers their hidden states, weights the experts' outputs, restores the order and sums
#: the k rows of each token in fp32; its backward scatters each of them back (``index_put``, ``new_zeros``), and the
#: gate and up projections' gradients are concatenated. Counted on fake-tensor steps of the shipped Qwen3-30B-A3B,
#: Mixtral-8x7B and Qwen1.5-MoE-A2.7B configs at 1 and 2 blocks (``benchmarks/count_moe_routing.py``,
#: ``benchmarks/results/moe_routing.md``): each family's count beyond its dense kin's priced traffic, fitted by least
#: squares over the three (forward's S·f term dropped: it went below 0), within 3 % of each count, within 10 % with
#: the family left out of the fit; not fitted to any run's speed. Qwen3-30B-A3B's routing then adds about 5 GB a
#: block per 4096 tokens, as much as the rest of its elementwise traffic. Families without a dense kin's column take
#: the fallback price, which has no routing term.
ROUTING_BYTES = {"forward": (28.73, 0.0), "backward": (46.90, 13.10)}


def routing_traffic_bytes(model: ModelProfile, plan: Plan, seq_len: int) -> float:
    """Bytes one micro-batch's MoE routing moves on one device before any model-parallel split (:data:`ROUTING_BYTES`:
    per MoE block its forward, again under checkpointing's recomputation, and its backward), scaled from 16-bit to
    the activations' width; 0 for a dense model."""
    if not model.moe_layers or not model.num_experts:
        return 0.0
    k = max(model.experts_per_token, 1)
    rows = plan.micro_batch_size * seq_len * k * (model.capacity_factor or 1.0)
    width = expert_width(model)
    (fh, ff), (bh, bf) = ROUTING_BYTES["forward"], ROUTING_BYTES["backward"]
    forward, backward = rows * (fh * model.hidden_size + ff * width), rows * (bh * model.hidden_size + bf * width)
    scale = Precision.of(plan.precision).activation_bytes / 2
    return model.moe_layers * (forward * (1 + recompute_share(model, plan)) + backward) * scale


def _column(model: ModelProfile, plan: Plan) -> dict | None:
    """The traffic column of the plan's class of step: the model's family (a mixture of experts: its :data:`DENSE_KIN`),
    its language-modelling task's column (a classifier's blocks move what the LM's do; its head's s·b·v terms vanish
    with the feature)."""
    if plan.framework != Framework.TRANSFORMERS:
        return None
    family = _table().get(model.model_type) or _table().get(DENSE_KIN.get(model.model_type, ""))
    if not family:
        return None
    legacy = plan.model_copy(update={Setting.LEGACY_BITSANDBYTES: False})  # the same ops; what is saved differs
    return next((family[k] for k in calibration_keys(legacy) if k in family), None)


def eager_traffic_bytes(model: ModelProfile, plan: Plan, seq_len: int) -> float | None:
    """Bytes one micro-batch of ``plan`` (its micro-batch, ``seq_len`` tokens a row) moves in elementwise kernels
    in an eager step (with Liger's kernels under ``--loss-kernel liger`` / ``liger-layers``; the fused linear
    cross-entropy at :data:`FLCE_BYTES_PER_LOGIT`), forward + backward + recomputation, on one
    device before any model-parallel split, as counted and fitted; None where that was not counted: a family without
    a traffic column (:func:`fallback_ratio` prices it), Liger on a family without its stand-ins, the chunked loss."""
    c, kernel = _column(model, plan), LossKernel.of(plan.loss_kernel)
    if c is None or kernel == LossKernel.CHUNKED:
        return None
    if kernel.spec.fused_layers:
        if "liger" not in c:
            return None
        c = {**c, **c["liger"]}
    x = traffic_features(model, plan.micro_batch_size, seq_len)
    forward, backward = list(c["forward"]), list(c["backward"])
    if not kernel.spec.grad_logits:  # the fused linear cross-entropy: the logits never reach HBM whole
        logits = FEATURES.index("sbv")
        forward[logits], backward[logits] = FLCE_BYTES_PER_LOGIT, 0.0
    layer_forward = sum(f * v for f, v in zip(forward[:LAYER_FEATURES], x))
    total = sum(f * v for f, v in zip(forward, x)) + sum(b * v for b, v in zip(backward, x))
    total += recompute_share(model, plan) * layer_forward
    if Attention.of(plan.attention).spec.keeps_scores:
        scores = block_layers(model) * plan.micro_batch_size * model.num_attention_heads * seq_len * seq_len
        total += scores * (c["eager_forward"] * (1 + recompute_share(model, plan)) + c["eager_backward"])
    return max(total, 0.0) + routing_traffic_bytes(model, plan, seq_len)


def fallback_ratio() -> float:
    """Counted eager traffic over the saved activations × 3, median over the calibrated columns (each at its
    family's reference model, 2 × 1024 tokens): the multiplier of a family without columns."""
    return float(_table()["_meta"]["fallback_ratio"])


#: The share of the elementwise traffic left once Inductor fuses chains of pointwise ops into single kernels (each
#: tensor read and written once per chain, not once per op), beyond the saved activations it drops
#: (:func:`advisor.engine.structural.fused_layer_savings`). Checked against the three published compile-on /
#: compile-off pairs of two sources (torchtitan Llama 3.1 8B on 8 and 128 H100s: +16 %; lightning-thunder
#: open_llama_3b on one A100: +22 %; ``benchmarks/published``).
COMPILE_ELEMENTWISE_TRAFFIC = 0.5

_UNFUSED = {Setting.TORCH_COMPILE: False, Setting.LOSS_KERNEL: LossKernel.STANDARD.value}


def elementwise_traffic_bytes(model: ModelProfile, plan: Plan, seq_len: int) -> float:
    """Bytes one micro-batch of ``plan`` moves in memory-bound kernels on one device before any model-parallel split:
    the step's counted traffic (:func:`eager_traffic_bytes`: eager, or with Liger's kernels where the family's column
    counted them; else the unfused step's, or the fallback's), times the share of the saved activations the kernels
    it was not counted with keep, times :data:`COMPILE_ELEMENTWISE_TRAFFIC` under torch.compile. A Megatron-style
    plan: the saved activations × (3 + r), its fused layers moving each tensor about once per pass."""
    if plan.framework == Framework.MEGATRON:
        return activation_traffic_bytes(model, plan, seq_len) * (3.0 + recompute_shares(model, plan)[0])
    base = plan.model_copy(update={Setting.TORCH_COMPILE: False})
    counted = eager_traffic_bytes(model, base, seq_len)
    if counted is None:
        base = plan.model_copy(update=_UNFUSED)
        counted = eager_traffic_bytes(model, base, seq_len)
    if counted is None:
        counted = (
            activation_traffic_bytes(model, base, seq_len) * (3.0 + recompute_shares(model, plan)[0]) * fallback_ratio()
        )
    traffic = (
        counted
        * activation_traffic_bytes(model, plan, seq_len)
        / max(activation_traffic_bytes(model, base, seq_len), 1)
    )
    return traffic * (COMPILE_ELEMENTWISE_TRAFFIC if plan.torch_compile else 1.0)
