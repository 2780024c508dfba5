"""A mixture of experts' routed experts as the installed transformers and PEFT run them: how their GEMMs run, and what
LoRA on them adds.

How the expert GEMMs run (transformers 5.24, ``integrations/moe.py``). The routed experts of Qwen2/3-MoE, Mixtral,
DeepSeek-V2/V3 and OLMoE are classes decorated with ``@use_experts_implementation``, whose default
``experts_implementation`` is ``"grouped_mm"`` (``PreTrainedModel.get_correct_experts_implementation``). Its forward
sorts the token-expert pairs by expert and runs each projection as one grouped GEMM over all experts
(``torch.nn.functional.grouped_mm``, offsets per expert), unless ``_can_use_grouped_mm`` says no: on CUDA below compute
capability 8.0 (V100, T4: the kernel needs SM80+ in torch >= 2.9) and under torch.compile with weights that are not
bf16, where ``_grouped_mm_fallback`` loops over the experts with one ``torch.mm`` each, forward and backward
(:func:`experts_implementation`). Either way the input is cast to the weights' dtype (``input.to(weight.dtype)``: the
grouped GEMM is not autocast-enabled), so fp32 master weights run the experts in fp32 (TF32 where enabled).

How efficient they are (:func:`expert_gemm_efficiency`). A grouped GEMM fills the GPU with the tiles of all experts at
once, so it is priced as the speed model prices the dense layers, at the curve of the micro-batch's T·C token rows,
less the tile quantization of each expert's rows (a group's rows are padded to the kernel's 128-row tile: NVIDIA
"Matrix Multiplication Background User's Guide", "Tile quantization",
https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/index.html): fine-grained experts
(Qwen3-30B-A3B: 128 experts, k·T/E = 128·b rows at 2048 tokens a row) pay it at small micro-batches. The curve at all
k·T rows was tried: it raised Mixtral's predicted QLoRA tokens/s on 2 A100s (fms-acceleration, ``benchmarks/published``,
already 1.24x the published) past 1.25x, so the T·C rows stay. The loop runs E small GEMMs of k·T·C/E rows one after
another: each saturates only as a GEMM of its own rows does, and each launch costs :data:`LAUNCH_SECONDS`. Both use
the speed model's own efficiency curve (:func:`advisor.engine.speed._efficiency`); no constant here was fitted.

LoRA on the experts (PEFT ``lora.ParamWrapper``, ``target_parameters``: :mod:`probes.lora_config`). PEFT cannot factor
the input out of a 3-D parameter, so each forward parametrizes it: ``W + scaling·B·A`` per expert, folded with one
``torch.baddbmm`` into a full-size 16-bit copy of the block's expert weights (``_LoraFactorsProxy``), which the
grouped GEMM then saves for its backward. Per MoE block that copy (:func:`merged_expert_bytes`) is held from the forward
to the backward (without checkpointing; with it, only while the block is recomputed), the backward writes its gradient
(the experts' full weight gradient, 2·N·T FLOPs as in full fine-tuning) and reads it twice for the factors' gradients:
:func:`merged_expert_traffic_bytes` passes of the tensor through HBM per micro-batch, memory-bound at rank << d.
"""

from __future__ import annotations

import math

from advisor.core.plan import Plan
from advisor.core.vocabulary import Method, Precision, WeightsDtype
from advisor.engine.structural import sixteen_bit_weights
from probes.adapters import adapts_experts
from probes.hardware import GPUInfo
from probes.model import ModelProfile

GROUPED_MM, LOOP = "grouped_mm", "loop"
#: Rows of the grouped GEMM's tile: each expert's rows are padded to a multiple (CUTLASS's 128 x N tiles for bf16 on
#: SM80/SM90; NVIDIA's tile quantization, module docstring). A kernel fact, not a fit.
TILE_ROWS = 128
#: Seconds of one kernel launch and its Python dispatch in the per-expert loop (eager PyTorch launches cost a few
#: microseconds each: PyTorch "Performance Tuning Guide", CUDA Graphs / launch overhead,
#: https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html); not fitted.
LAUNCH_SECONDS = 10e-6
#: The loop's kernels per expert and MoE block, forward + backward: a forward mm per projection (gate_up, down: 2),
#: and two in the backward per projection (the input's and the weight's gradients: 4): ``_grouped_mm_fallback`` and
#: ``_grouped_mm_fallback_bwd``.
LOOP_KERNELS_PER_EXPERT = 6
#: Passes of the merged expert weights through HBM per micro-batch under LoRA on the experts (module docstring): the
#: forward's baddbmm reads W and writes W + B·A (2), the backward writes the merged weight's gradient and reads it for
#: each factor's gradient (3); checkpointing's recomputation repeats the forward's 2. Counted, not fitted.
MERGE_PASSES, MERGE_RECOMPUTE_PASSES = 5, 2


def experts_implementation(plan: Plan, gpu: GPUInfo | None) -> str:
    """``grouped_mm`` or ``loop`` (module docstring): the loop below compute capability 8.0 and under torch.compile
    with weights that are not bf16 (transformers ``_can_use_grouped_mm``)."""
    if gpu is None:
        return GROUPED_MM
    bf16 = plan.precision == Precision.BF16 and not experts_in_fp32(plan)
    if gpu.cc < (8, 0) or (plan.torch_compile and not bf16):
        return LOOP
    return GROUPED_MM


def experts_in_fp32(plan: Plan) -> bool:
    """Whether the expert GEMMs run in fp32 under 16-bit mixed precision: their input is cast to the weights' dtype
    (module docstring), and fp32 master weights without a 16-bit working copy (ZeRO / FSDP gather one; QLoRA's and
    a 16-bit LoRA base are 16-bit) stay fp32."""
    if plan.precision == Precision.FP32 or Method.of(plan.method).spec.quantized_base:
        return False
    return not sixteen_bit_weights(plan)


def routed_rows(model: ModelProfile, plan: Plan, seq_len: int) -> float:
    """Token-expert rows one expert's GEMM gets per micro-batch on average: k·T·C/E (T the micro-batch's tokens, C the
    capacity factor)."""
    tokens = plan.micro_batch_size * seq_len * max(model.experts_per_token, 1) * (model.capacity_factor or 1.0)
    return tokens / max(model.num_experts, 1)


def expert_gemm_efficiency(model: ModelProfile, plan: Plan, gpu: GPUInfo | None, seq_len: int, efficiency) -> float:
    """The fraction of peak the routed experts' GEMMs reach (module docstring): ``efficiency(rows)`` is the speed
    model's curve for a GEMM of ``rows`` rows at the model's hidden size. Grouped: the curve at the micro-batch's T·C
    token rows times each expert's rows over their tile-padded count; loop: the curve at one expert's rows."""
    rows = routed_rows(model, plan, seq_len)
    if experts_implementation(plan, gpu) == LOOP:
        return efficiency(max(rows, 1.0))
    padded = TILE_ROWS * math.ceil(max(rows, 1.0) / TILE_ROWS)
    return efficiency(rows * model.num_experts / max(model.experts_per_token, 1)) * rows / padded


def loop_launch_seconds(model: ModelProfile, plan: Plan, gpu: GPUInfo | None) -> float:
    """The per-expert loop's launches per micro-batch on one device (0 for the grouped GEMM), seconds."""
    if not model.num_experts or experts_implementation(plan, gpu) != LOOP:
        return 0.0
    blocks = model.moe_layers / max(plan.pipeline_parallel, 1)
    experts = model.num_experts / plan.expert_parallel_size
    return blocks * experts * LOOP_KERNELS_PER_EXPERT * LAUNCH_SECONDS


def _merged_block_bytes(model: ModelProfile, plan: Plan) -> int:
    """Bytes of one MoE block's merged expert weights on one device (0 unless LoRA reaches the experts)."""
    if not Method.of(plan.method).spec.adapters or not adapts_experts(model, plan.lora_targets):
        return 0
    width = 2 if Method.of(plan.method).spec.quantized_base else WeightsDtype.of(plan.weights_dtype).bytes
    split = plan.expert_parallel_size * max(plan.tensor_parallel, 1)
    return model.routed_parameters // max(model.moe_layers, 1) // split * width


def merged_expert_bytes(model: ModelProfile, plan: Plan) -> tuple[int, int]:
    """(bytes held from the forward to the backward, what the backward's peak adds) of LoRA's merged expert weights
    (module docstring): every MoE block's copy held without checkpointing, none under it; the backward adds the block's
    weight gradient, and under checkpointing the recomputed copy beside it."""
    block = _merged_block_bytes(model, plan)
    if not block:
        return 0, 0
    if plan.gradient_checkpointing:
        return 0, 2 * block
    return int(block * model.moe_layers / max(plan.pipeline_parallel, 1)), block


def merged_expert_traffic_bytes(model: ModelProfile, plan: Plan) -> float:
    """Bytes LoRA's merged expert weights move through HBM per micro-batch on one device (module docstring)."""
    block = _merged_block_bytes(model, plan)
    passes = MERGE_PASSES + (MERGE_RECOMPUTE_PASSES if plan.gradient_checkpointing else 0)
    return float(block * model.moe_layers / max(plan.pipeline_parallel, 1) * passes)
