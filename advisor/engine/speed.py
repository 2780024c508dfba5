"""The analytic speed model: seconds per optimizer step of a plan, tokens/s and MFU.

FLOPs per step (Kaplan et al. 2020, https://arxiv.org/abs/2001.08361 sec. 2.1; Narayanan et al.
2021, https://arxiv.org/abs/2104.04473 sec. 5.1): forward = 2·N·T for the matmul parameters N
over T tokens, plus 4·b·s²·(heads·head_dim) per attention block; backward = 2x forward (HF
guide, "forward vs backward Execution Speed"); activation checkpointing adds one forward.

Time = matmul FLOPs / (peak rate of the precision × efficiency) + memory-bound work
(elementwise ops, the optimizer step, fp16 loss-scaling) / memory bandwidth + exposed
communication. Efficiency grows with the tokens per micro-batch and the hidden size and drops
when the tokens dimension is not a tensor-core multiple (NVIDIA "Tensor Core Requirements").

First calibration: the seeds' V100 bert-large runs (fp16 about 2x fp32, checkpointing about
20-30 % slower, accumulation close to a larger batch). Known limitations: no kernel-level
model; the efficiency curve is a fit, not a measurement on your GPU (``advisor validate`` measures).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from advisor.engine.memory import MemoryEstimate, activation_traffic_bytes
from probes.hardware import GPUInfo, HostInfo, PeakTflops
from probes.model import ModelProfile
from probes.units import gbit_to_bytes_per_s, gbyte_to_bytes_per_s
from probes.adapters import adapter_parameters, frozen_base_bytes, quantized_parameters
from probes.kernels import Attention
from probes.vocabulary import (DEFAULT_NETWORK, OPTIMIZER_SPECS, PARALLELISM_SPECS, Family, Method, Offload,
                               Parallelism, Precision, Task, WeightsDtype)
from rules.facts import Plan

#: Generic peak rates (TFLOP/s) and bandwidth (GB/s) by compute-capability major, for GPUs
#: missing from the catalog: conservative values of that generation's data-center parts.
_GENERIC_GPU = {
    7: (PeakTflops(fp32=14.0, fp16=110.0), 800.0),
    8: (PeakTflops(fp32=19.5, tf32=150.0, fp16=300.0, bf16=300.0), 1500.0),
    9: (PeakTflops(fp32=60.0, tf32=400.0, fp16=800.0, bf16=800.0), 3000.0),
}
#: fp32 FLOP per cycle per core: 2 FMA units × SIMD lanes × 2 (Intel 64 and IA-32 Architectures
#: Optimization Reference Manual, https://www.intel.com/content/www/us/en/developer/articles/technical/intel-sdm.html).
_CPU_FLOP_PER_CYCLE = {"avx512f": 64, "avx2": 32, "avx": 16}
CPU_BANDWIDTH_GBPS = 20.0  #: typical sustained DRAM bandwidth of a few server cores
PCIE_GBPS = {3: 12.0, 4: 24.0, 5: 48.0}  #: effective one-direction x16 bandwidth, GB/s


class SpeedEstimate(BaseModel):
    """Time and throughput of one optimizer step (all GPUs together)."""

    step_time_s: float = Field(description="seconds per optimizer step (all micro-batches)")
    samples_per_s: float = Field(description="samples per second, all devices")
    tokens_per_s: float = Field(description="tokens per second, all devices")
    flops_per_step: float = Field(description="model FLOPs per optimizer step, recomputation excluded, all devices")
    mfu: float = Field(description="model FLOPs utilization: achieved model FLOP/s / peak FLOP/s of the precision")
    peak_flops_per_s: float = Field(description="peak FLOP/s of one device at the plan's precision")
    communication_s: float = Field(0.0, description="exposed communication per step, seconds")


def attention_forward_flops(model: ModelProfile, micro_batch: int, seq_len: int, attended: float | None = None
                            ) -> float:
    """Forward FLOPs of the attention score and value matmuls of one micro-batch: 4·b·s·s'·(heads·head_dim) per
    attention block, where s' is the keys each query attends (``attended``; default ``seq_len``; a packed row's
    document length under padding-free packing)."""
    inner = model.num_attention_heads * model.head_dim
    blocks = model.encoder_layers + model.decoder_layers * (2 if model.family == Family.ENCODER_DECODER else 1)
    return 4.0 * micro_batch * seq_len * (attended or seq_len) * inner * blocks


def forward_flops(model: ModelProfile, micro_batch: int, seq_len: int) -> float:
    """Forward FLOPs of one micro-batch: 2·N·T plus self- (and cross-) attention score/value matmuls.

    N is the matmul parameters one token uses: for a mixture of experts the k routed experts it is sent
    to, the shared experts and the routers (2·E·h FLOPs per token and MoE block), not every expert (Fedus
    et al. 2021, https://arxiv.org/abs/2101.03961 sec. 2). With an expert capacity factor C the experts run
    on buffers padded to C times their share of the tokens, so the routed experts' FLOPs scale by C (sec. 2.2).
    """
    n = model.active_matmul_parameters + ((model.capacity_factor or 1.0) - 1.0) * model.routed_active_matmul_parameters
    return 2.0 * n * micro_batch * seq_len + attention_forward_flops(model, micro_batch, seq_len)


def device_rates(plan: Plan, gpu: GPUInfo | None, host: HostInfo | None) -> tuple[float, float]:
    """(peak FLOP/s for the plan's matmuls, memory bandwidth in bytes/s) of one device."""
    if gpu is None:
        cores = (host.cpu_cores if host else 1) / max(plan.cpu_processes, 1)  # processes share the cores
        ghz = (host.cpu_mhz or 2500.0) / 1000 if host else 2.5
        flags = set(host.cpu_flags) if host else set()
        per_cycle = next((v for k, v in _CPU_FLOP_PER_CYCLE.items() if k in flags), 8)
        if plan.precision == Precision.BF16:
            # AMX tiles run many bf16 FMAs per cycle (Intel SDM, vol. 1 ch. 20); VDPBF16PS (AVX-512 BF16)
            # could do two per fp32 lane, but on a Xeon without AMX oneDNN's bf16 matmuls ran at 0.54x
            # fp32's rate alone and a gpt2 training step's matmuls at about 0.8x under autocast
            # (torch 2.13; benchmarks/results/validate_cpu.md)
            per_cycle *= 8 if "amx_bf16" in flags else 0.8 if "avx512_bf16" in flags else 1
        return cores * ghz * 1e9 * per_cycle, CPU_BANDWIDTH_GBPS * 1e9
    peaks, bandwidth = gpu.peak_tflops, gpu.memory_bandwidth_gbps
    if peaks is None or bandwidth is None:
        peaks, bandwidth = _GENERIC_GPU[min(max(gpu.cc[0], 7), 9)]
    if (plan.precision != Precision.FP32):
        rate = getattr(peaks, plan.precision) or peaks.fp32
    elif plan.tf32 and gpu.tf32 and peaks.tf32:
        rate = peaks.tf32
    else:
        rate = peaks.fp32
    return (rate or 1.0) * 1e12, bandwidth * 1e9


#: The fraction of the 16-bit tensor-core peak large GEMMs approach on Ampere and newer (before the saturation in
#: tokens and hidden size of :func:`_efficiency`: 0.69 at h = 4096). Fitted to the 36 published runs with a rate in
#: ``benchmarks/published/*.jsonl`` (flash-attention, torchtitan A100 / H100 / H200, NeMo AutoModel, NeMo, DeepSpeed,
#: lightning-thunder: 6 sources; median predicted / published 0.86 at 0.75, 0.64 at the former 0.50, which had been
#: set from the seeds' V100 BERT runs alone). cuBLAS reaches 70-80 % of peak on large bf16 GEMMs (NVIDIA "Matrix
#: Multiplication Background User's Guide", https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-
#: multiplication/index.html), so this is a plausible ceiling, not a free parameter.
TENSOR16_TOP = 0.75
#: The same on Volta and Turing (first- and second-generation tensor cores), fitted to the seeds' V100 BERT runs
#: (HF guide, ../shared/seeds/003: fp16 "almost twice as fast" as fp32, checkpointing 20-30 % slower).
TENSOR16_TOP_VOLTA = 0.50


def _efficiency(plan: Plan, model: ModelProfile, gpu: GPUInfo | None, seq_len: int) -> float:
    """Fraction of peak the matmuls reach: saturates with tokens per micro-batch and hidden size."""
    tokens = plan.micro_batch_size * seq_len
    h = model.hidden_size
    if gpu is None:
        # fitted to advisor validate on a 2-core Xeon (benchmarks/results/validate_cpu.md): fp32 trials of
        # gpt2, distilbert, bert-base and t5-small reached 31-65 % (median 44 %) of cores x clock x 64 FLOP/cycle
        return 0.50 * tokens / (tokens + 64)
    tensor16 = (plan.precision != Precision.FP32) and gpu.tensor_cores
    tf32 = plan.precision == Precision.FP32 and plan.tf32 and gpu.tf32
    if tensor16:
        top, half = TENSOR16_TOP if gpu.cc >= (8, 0) else TENSOR16_TOP_VOLTA, 1.5e6 / h
    elif tf32:
        top, half = 0.55, 0.75e6 / h
    else:
        top, half = 0.75, 256.0
    eff = top * tokens / (tokens + half) * h / (h + 256)
    if (tensor16 or tf32) and (tokens % 8 or h % 8):
        eff *= 0.85  # misaligned GEMM dimensions fall off the tensor-core fast path
    return eff


def _optimizer_bytes_per_param(plan: Plan) -> float:
    """Memory traffic of one optimizer step, bytes per parameter (reads + writes)."""
    spec = OPTIMIZER_SPECS[plan.optimizer]
    traffic = spec.step_traffic_bytes_per_param
    if spec.states_follow_weights and plan.weights_dtype == WeightsDtype.BF16 and not Method.of(plan.method).spec.adapters:
        traffic /= 2  # parameters, gradients and moments all in bf16
    if plan.precision == Precision.FP16:
        traffic += 8.0  # GradScaler: unscale and inf-check every gradient
    return traffic + 4.0  # zero_grad / accumulation buffer


def _link_bandwidth(gpu: GPUInfo | None, nvlink: bool, nodes: int, inter_node_bytes_per_s: float | None = None) -> float:
    """Bus bandwidth for collectives, bytes/s: the slowest hop (inter-node, NVLink or PCIe). ``nvlink``: a ring
    through the node's GPUs runs over NVLink (``HardwareProfile.nvlink_ring``; bridged pairs do not).

    ``inter_node_bytes_per_s``: the network between nodes (``HardwareProfile.inter_node_bytes_per_s``;
    default: the catalog figure of :data:`probes.vocabulary.DEFAULT_NETWORK`).
    """
    if nodes > 1:
        return inter_node_bytes_per_s or gbit_to_bytes_per_s(DEFAULT_NETWORK.gbit_s)
    if nvlink and gpu is not None and gpu.nvlink_bandwidth_gbps:
        return gpu.nvlink_bandwidth_gbps / 2 * 1e9  # one direction
    gen = gpu.pcie_generation if gpu is not None and gpu.pcie_generation else 4
    # without PCIe peer-to-peer NCCL stages through host memory (its SHM transport): every byte crosses PCIe twice
    # (NCCL docs, NCCL_P2P_DISABLE / NCCL_SHM_DISABLE, https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html)
    staged = 2 if gpu is not None and not gpu.peer_to_peer else 1
    return gbyte_to_bytes_per_s(PCIE_GBPS.get(gen, 24.0)) / staged


def _frozen_weight_bytes(model: ModelProfile, plan: Plan) -> float:
    """Bytes of one model replica's frozen base weights (LoRA: the weights' dtype; QLoRA: 4-bit blocks)."""
    base = frozen_base_bytes(model, Method.of(plan.method).spec.quantized_base, WeightsDtype.of(plan.weights_dtype).bytes)
    return base / plan.model_parallel_size


#: Fraction of an overlappable collective that can hide behind compute (DDP's gradient buckets all-reduce during
#: the backward, Li et al. 2020, https://arxiv.org/abs/2006.15704 sec. 3.2.3; DeepSpeed's ``overlap_comm`` and
#: ZeRO-3 prefetching, https://www.deepspeed.ai/docs/config-json/#zero-optimizations-for-fp16-training; FSDP's
#: backward / forward prefetch, Zhao et al. 2023, https://arxiv.org/abs/2304.11277 sec. 3.3.2). An assumption
#: carried from the first calibration, not fitted: the first bucket of a backward and the last all-gather of a
#: forward cannot overlap, and a collective hides at most behind the compute it runs beside.
OVERLAP = 0.5


def _exposed(collective_s: float, compute_s: float | None) -> float:
    """Seconds of an overlappable collective left exposed: at least (1 − :data:`OVERLAP`) of it, and whatever
    does not fit beside ``compute_s`` (None: compute assumed long enough)."""
    floor = (1 - OVERLAP) * collective_s
    return floor if compute_s is None else max(floor, collective_s - compute_s)


def _sharded_seconds(parallelism: Parallelism, k: int, one_pass: float, grad_bytes: float, param_bytes: float,
                     compute_s: float | None) -> float:
    """Exposed seconds of a sharded strategy's collectives per step inside its group (see
    :func:`communication_seconds`); ``one_pass``: seconds per byte of one reduce-scatter or all-gather."""
    stage, fsdp = parallelism.stage, parallelism.fsdp
    gathers = 2 if stage >= 3 else 1 if fsdp else 0  # parameter all-gathers per micro-batch
    per_micro = gathers * one_pass * param_bytes
    reduce = one_pass * grad_bytes
    if fsdp:  # sync_each_batch: a reduce-scatter every micro-batch, beside its backward
        return k * _exposed(per_micro + reduce, compute_s)
    if stage == 1:  # reduce at the boundary, then all-gather the updated partitions: both exposed
        return 2 * one_pass * grad_bytes
    seconds = k * _exposed(per_micro + reduce, compute_s)  # ZeRO-2 / 3: a reduce-scatter every micro-batch
    if stage == 2:
        seconds += one_pass * param_bytes  # the updated partitions, all-gathered after the step
    return seconds


def communication_seconds(model: ModelProfile, plan: Plan, gpu: GPUInfo | None, nvlink: bool, nodes: int,
                          inter_node_bytes_per_s: float | None = None,
                          compute_s_per_micro: float | None = None) -> float:
    """Exposed data-parallel communication per optimizer step, seconds, for what the emitted config runs.

    Ring collectives over n ranks move (n−1)/n of the buffer per device for a reduce-scatter or an all-gather and
    2·(n−1)/n for an all-reduce (ZeRO paper, https://arxiv.org/abs/1910.02054 sec. 7: DDP 2Ψ, ZeRO-3 3Ψ). With
    k micro-batches per step (S: gradient bytes, 16-bit under mixed precision; Ψ: 16-bit parameter bytes):

    - DP / DDP: the Trainer runs every micro-batch but the last under ``no_sync`` (transformers ``Trainer``
      ``_inner_training_loop``; DDP docs, ``no_sync``): one all-reduce per step, overlapped with the last backward.
    - ZeRO-1 (DeepSpeed): gradients reduced at the accumulation boundary, after the backward, and the updated
      parameter partitions all-gathered after the step: 2·(n−1)/n·S per step, not overlapped.
    - ZeRO-2: DeepSpeed reduce-scatters the gradients after every micro-batch, the Trainer does not skip it
      (DeepSpeed maintainers, https://github.com/deepspeedai/DeepSpeed/issues/2252), overlapped with the backward
      (``overlap_comm``); the parameter all-gather after the step is not.
    - ZeRO-3: every micro-batch all-gathers the parameters in forward and again in backward and reduce-scatters
      the gradients: 3·(n−1)/n per micro-batch (about 1.5·k all-reduces), prefetched / overlapped.
    - FSDP: the emitted TrainingArguments set accelerate's ``sync_each_batch``
      (``accelerator_config.gradient_accumulation_kwargs``), so every micro-batch reduce-scatters its gradients and
      they stay sharded, as under ZeRO. The Trainer's default, ``no_sync`` on all but the last micro-batch (FSDP1
      ``no_sync``, FSDP2 ``set_requires_gradient_sync(False)``), would reduce once per step but keep the full
      gradients ("FSDP will accumulate the full model gradients (instead of gradient shards) until the eventual
      sync", PyTorch FSDP docs, ``FullyShardedDataParallel.no_sync``), undoing the sharding a plan needed.
      FULL_SHARD / HYBRID_SHARD all-gather forward and backward, SHARD_GRAD_OP forward only (FSDP2 reshards after
      backward); prefetched (``fsdp_backward_prefetch``), the reduce-scatter overlapped with the backward.
    - HYBRID_SHARD over nodes (PyTorch FSDP docs, ``ShardingStrategy.HYBRID_SHARD``): the sharded collectives run
      inside a node over its links; between nodes each GPU all-reduces its 1/g shard with its replicas every
      micro-batch, and the node's g GPUs share the node's network (``inter_node_bytes_per_s`` is the node's:
      NICs × link speed), so the node sends 2·(m−1)/m·S per micro-batch, as much as a DDP ring across the nodes.

    Overlappable parts hide behind compute as :func:`_exposed` says (``compute_s_per_micro``: one micro-batch's
    compute, None: long enough); inter-node bandwidth per node: ``inter_node_bytes_per_s``, else 200 Gb/s.
    """
    n = plan.data_parallel_size
    parallelism = Parallelism.of(plan.parallelism)
    if n <= 1 or parallelism == Parallelism.NONE:
        return 0.0
    P = model.num_parameters // plan.model_parallel_size  # each GPU syncs its own slice of the model
    wide = parallelism.replicated or plan.precision == Precision.FP32
    grad_bytes, param_bytes = (4 if wide else 2) * P, (4 if plan.precision == Precision.FP32 else 2) * P
    adapters = Method.of(plan.method).spec.adapters
    if adapters:  # only the adapters have gradients (fp32); a sharded frozen base is gathered like parameters
        grad_bytes = 4 * adapter_parameters(model, plan.lora_rank, plan.lora_targets) // plan.model_parallel_size
        param_bytes = _frozen_weight_bytes(model, plan)
    k = plan.gradient_accumulation_steps
    if plan.pipeline_parallel > 1 and nodes % plan.pipeline_parallel == 0:
        nodes //= plan.pipeline_parallel  # the stages span the nodes: each data-parallel group is inside fewer
    hybrid = parallelism.spec.replicated_across_nodes and nodes > 1
    group = max(n // nodes, 1) if hybrid else n  # the ranks the sharded collectives run over
    bw = _link_bandwidth(gpu, nvlink, 1 if hybrid else nodes, inter_node_bytes_per_s)
    one_pass = (group - 1) / group / bw  # seconds per byte of one reduce-scatter or all-gather
    if parallelism.replicated or (adapters and parallelism.stage < 3):
        seconds = _exposed(2 * one_pass * grad_bytes, compute_s_per_micro)  # one all-reduce (no_sync)
        return seconds * (2.5 if parallelism == Parallelism.DP else 1.0)  # DP: scatter, replicate, gather
    seconds = _sharded_seconds(parallelism, k, one_pass, grad_bytes, param_bytes, compute_s_per_micro)
    if hybrid:  # the node's GPUs share its network: the node sends a whole all-reduce's worth per micro-batch
        between = 2 * (nodes - 1) / nodes * grad_bytes / _link_bandwidth(gpu, nvlink, nodes, inter_node_bytes_per_s)
        seconds += k * _exposed(between, compute_s_per_micro)
    return seconds


def model_parallel_seconds(model: ModelProfile, plan: Plan, seq_len: int, gpu: GPUInfo | None, nvlink: bool,
                           nodes: int, inter_node_bytes_per_s: float | None = None) -> float:
    """Communication of tensor and pipeline parallelism per micro-batch and stage, seconds (not overlapped).

    Tensor parallel: 4 all-reduces of the b·s·h activations per layer (2 forward, 2 backward; Megatron-LM,
    Shoeybi et al. 2019, https://arxiv.org/abs/1909.08053 sec. 3) over the node's links. Pipeline
    parallel: the activations forward and their gradients backward across each stage boundary
    (Narayanan et al. 2021 sec. 3), over the network between nodes when the stages span nodes.
    """
    tp, pp = max(plan.tensor_parallel, 1), max(plan.pipeline_parallel, 1)
    width = Precision.of(plan.precision).activation_bytes
    bsh = plan.micro_batch_size * seq_len * model.hidden_size * width
    seconds = 0.0
    if tp > 1:
        layers = (model.encoder_layers + model.decoder_layers) / pp
        seconds += 4 * layers * 2 * (tp - 1) / tp * bsh / _link_bandwidth(gpu, nvlink, 1)
    if pp > 1:
        seconds += 2 * bsh / _link_bandwidth(gpu, nvlink, nodes if nodes > 1 else 1, inter_node_bytes_per_s)
    return seconds


#: Bytes/s a CPU sustains in an offloaded optimizer step. DeepSpeed's CPU-Adam is vectorised and bound by
#: memory bandwidth (ZeRO-Offload, Ren et al. 2021, https://arxiv.org/abs/2101.06840 sec. 5.1); a server's
#: DRAM sustains about 100 GB/s over its channels. An assumption, not yet measured by this project.
HOST_OPTIMIZER_BYTES_PER_S = 100e9
#: CPU-Adam's traffic per parameter: reads the fp32 master, gradient and two moments, writes the master, the
#: moments and the 16-bit copy sent back to the GPU (4·4 + 3·4 + 2 B).
HOST_OPTIMIZER_BYTES_PER_PARAM = 30.0
#: NVMe bandwidth for ZeRO-Infinity, bytes/s: a PCIe 4 x4 SSD reads ~7 GB/s and writes ~5 GB/s sequentially;
#: ZeRO-Infinity (Rajbhandari et al. 2021, https://arxiv.org/abs/2104.07857 sec. 6) reaches that with large
#: asynchronous transfers; 5 GB/s for reads and writes together.
NVME_BYTES_PER_S = 5e9
#: Memory traffic of dequantizing one NF4 weight and using it: read 0.5 B, write the 16-bit weight, read it
#: back in the matmul (bitsandbytes dequantizes a layer's weight before each matmul, QLoRA sec. 3). As a check,
#: not a fit: Raschka's LoRA experiments measured QLoRA 39 % slower than LoRA on a 7B model
#: (https://magazine.sebastianraschka.com/p/practical-tips-for-finetuning-llms, "QLoRA Compute-Memory Trade-offs").
DEQUANT_BYTES_PER_PARAM = 4.5


def offload_seconds(model: ModelProfile, plan: Plan, compute_s_per_micro: float) -> float:
    """Time offloading adds to one optimizer step, seconds.

    Optimizer offload (ZeRO-Offload, Ren et al. 2021 sec. 4): the 16-bit gradients go to the CPU and the updated
    16-bit parameters come back over PCIe (2 + 2 B/param of this GPU's shard), and the CPU runs the step
    (:data:`HOST_OPTIMIZER_BYTES_PER_S`). Parameter offload (ZeRO-3 / FSDP CPUOffload): every micro-batch fetches
    the parameters for the forward and again for the backward (2 x 2 B/param), half of it hidden behind compute
    by prefetching. NVMe (ZeRO-Infinity): the states are read and written once per step and the parameters
    read per micro-batch at :data:`NVME_BYTES_PER_S`.
    """
    offload = Offload.of(plan.offload)
    if not offload.optimizer:
        return 0.0
    P = model.num_parameters / plan.model_parallel_size / max(plan.data_parallel_size, 1)
    pcie = PCIE_GBPS[4] * 1e9
    seconds = 4 * P / pcie + P * HOST_OPTIMIZER_BYTES_PER_PARAM / HOST_OPTIMIZER_BYTES_PER_S
    per_micro = 0.0
    if offload.parameters:
        per_micro = 2 * 2 * P / pcie  # this GPU's shard, up for the forward and again for the backward
    if offload.nvme:
        state_bytes = (4 + 4 + (OPTIMIZER_SPECS[plan.optimizer].state_bytes_per_param or 4)) * P
        seconds += 2 * state_bytes / NVME_BYTES_PER_S
        per_micro = max(per_micro, 2 * 2 * P / NVME_BYTES_PER_S)
    exposed = max(per_micro - 0.5 * compute_s_per_micro, 0.5 * per_micro)
    return seconds + plan.gradient_accumulation_steps * exposed


#: Achieved fp8 over bf16 matmul rate for the blocks' linear layers, dynamic scaling and casts included: fp8 tensor
#: cores run at twice the bf16 rate (Hopper whitepaper), torchao's float8 microbenchmarks reach 1.3-1.8x on large
#: GEMMs with its casts (https://github.com/pytorch/ao/tree/main/torchao/float8#performance). Checked, not fitted,
#: against torchao's end-to-end figures: 1.25x on Llama 3 8B over 8 H100s, up to 1.5x at 405B.
FP8_GEMM_SPEEDUP = 1.5


#: The share of the elementwise traffic left once Inductor fuses chains of pointwise ops into single kernels (each
#: tensor read and written once per chain, not once per op), beyond the saved activations it drops
#: (:func:`advisor.engine.memory.fused_layer_savings`): a chain read and written once instead of about twice. Checked
#: against the three published compile-on / compile-off pairs of two sources (torchtitan Llama 3.1 8B on 8 and 128
#: H100s: +16 %; lightning-thunder open_llama_3b on one A100: +22 %; ``benchmarks/published``), which it predicts
#: within 7-13 % and which barely constrain it (0.35 moves their ratios by 1 %).
COMPILE_ELEMENTWISE_TRAFFIC = 0.5


def _attention_efficiency(plan: Plan, gpu: GPUInfo | None, seq_len: int, matmul_efficiency: float) -> float:
    """Fraction of the 16-bit peak the plan's attention kernel reaches, forward + backward
    (:class:`probes.kernels.AttentionSpec`), rising with the sequence (FlashAttention-2 fig. 4-7: about 3/4 of its
    long-sequence rate at 512 tokens); the plan's matmul efficiency where the kernel has no figure (eager's batched
    GEMMs, fp32, the CPU)."""
    if gpu is None or plan.precision == Precision.FP32 or not gpu.tensor_cores:
        return matmul_efficiency
    table = dict(Attention.of(plan.attention).spec.efficiency)
    if gpu.cc[0] not in table:
        return matmul_efficiency
    return table[gpu.cc[0]] * seq_len / (seq_len + 256)


def _compute_seconds(model: ModelProfile, plan: Plan, seq_len: int, gpu: GPUInfo | None, peak: float,
                     attended: float | None) -> tuple[float, float]:
    """(matmul seconds of one micro-batch on one device, model FLOPs of that micro-batch).

    Linear layers: 2·N·T forward, twice that backward (frozen LoRA layers: activations' gradients only, plus the
    adapters' 6·A·T, Hu et al. sec. 4.2); fp8 runs the blocks' linear layers (not the LM head) at
    :data:`FP8_GEMM_SPEEDUP`. Attention: forward + backward = 3x its forward at its kernel's efficiency.
    Checkpointing recomputes one forward."""
    b = plan.micro_batch_size
    attention = attention_forward_flops(model, b, seq_len, attended)
    linear = forward_flops(model, b, seq_len) - attention_forward_flops(model, b, seq_len)
    if Method.of(plan.method).spec.adapters:
        trained = adapter_parameters(model, plan.lora_rank, plan.lora_targets)
        model_linear = 2 * linear + 6.0 * trained * b * seq_len
    else:
        model_linear = 3 * linear
    recompute = 1 if plan.gradient_checkpointing else 0
    executed_linear = model_linear + recompute * linear
    eff = _efficiency(plan, model, gpu, seq_len)
    if plan.fp8:
        head = 2.0 * model.vocab_size * model.hidden_size * b * seq_len if Task.of(model.task).language_modeling else 0
        share = max(linear - head, 0.0) / linear if linear else 0.0
        executed_linear *= (1 - share) + share / FP8_GEMM_SPEEDUP
    seconds = executed_linear / (peak * eff)
    seconds += (3 + recompute) * attention / (peak * _attention_efficiency(plan, gpu, seq_len, eff))
    return seconds, model_linear + 3 * attention


def estimate_speed(model: ModelProfile, plan: Plan, seq_len: int, memory: MemoryEstimate, gpu: GPUInfo | None,
                   host: HostInfo | None, nvlink: bool = False, nodes: int = 1,
                   inter_node_bytes_per_s: float | None = None, mean_sample_len: int | None = None) -> SpeedEstimate:
    """Estimate one optimizer step of ``plan``.

    Args:
        memory: the plan's memory estimate (its activation bytes drive the memory-bound time).
        nvlink: all GPUs of a node are NVLink-joined; nodes: number of nodes;
        inter_node_bytes_per_s: network bandwidth between nodes per node (default: InfiniBand HDR).
        mean_sample_len: average tokens per sample before padding (None: samples fill ``seq_len``). Unpacked rows
            carry one sample and its padding; packed rows (``plan.packing``) are full, their attention runs within
            documents of this length, and batch sizes count rows. ``tokens_per_s`` counts tokens, not padding.
    """
    peak, bandwidth = device_rates(plan, gpu, host)
    attended = mean_sample_len if plan.packing and mean_sample_len else None
    tp, pp = max(plan.tensor_parallel, 1), max(plan.pipeline_parallel, 1)
    compute, model_flops_micro = _compute_seconds(model, plan, seq_len, gpu, peak, attended)
    compute /= tp * pp
    method = Method.of(plan.method)
    trained = adapter_parameters(model, plan.lora_rank, plan.lora_targets) if method.spec.adapters \
        else model.num_parameters
    if method.spec.quantized_base:
        passes = 3 if plan.gradient_checkpointing else 2
        compute += passes * quantized_parameters(model) / (tp * pp) * DEQUANT_BYTES_PER_PARAM / (bandwidth * 0.7)
    act_traffic = activation_traffic_bytes(model, plan, seq_len) * (4.0 if plan.gradient_checkpointing else 3.0) / pp
    if tp > 1:
        act_traffic *= (10 + 24 / tp) / 34  # the share of a layer's activations tensor parallel splits (memory.py)
    if plan.torch_compile:
        act_traffic *= COMPILE_ELEMENTWISE_TRAFFIC
    mp_comm = model_parallel_seconds(model, plan, seq_len, gpu, nvlink, nodes, inter_node_bytes_per_s)
    micro_time = compute + act_traffic / (bandwidth * 0.7) + mp_comm
    k = plan.gradient_accumulation_steps
    params_here = trained / (tp * pp) / (plan.data_parallel_size if PARALLELISM_SPECS[plan.parallelism].stage else 1)
    optimizer_time = params_here * _optimizer_bytes_per_param(plan) / (bandwidth * 0.7)
    if Offload.of(plan.offload).optimizer:
        optimizer_time = offload_seconds(model, plan, compute)
    comm = communication_seconds(model, plan, gpu, nvlink, nodes, inter_node_bytes_per_s, compute)
    # 1F1B pipeline: k micro-batches pass p stages; the bubble adds p − 1 stage times (Narayanan sec. 2.2.1)
    step = (k + pp - 1) * micro_time + optimizer_time + comm
    comm += (k + pp - 1) * mp_comm  # reported: data-parallel sync + tensor / pipeline exchanges
    rows = plan.global_batch_size
    useful = seq_len if plan.packing or not mean_sample_len else min(mean_sample_len, seq_len)
    samples = rows * (seq_len / mean_sample_len if attended else 1)
    flops_step = model_flops_micro * k * plan.data_parallel_size
    devices = plan.data_parallel_size * tp * pp
    return SpeedEstimate(
        step_time_s=step, samples_per_s=samples / step, tokens_per_s=rows * useful / step,
        flops_per_step=flops_step, mfu=flops_step / (step * peak * devices),
        peak_flops_per_s=peak, communication_s=comm)
