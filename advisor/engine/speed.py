"""The analytic speed model: seconds per optimizer step of a plan, tokens/s and MFU.

FLOPs per step (Kaplan et al. 2020, https://arxiv.org/abs/2001.08361 sec. 2.1; Narayanan et al.
2021, https://arxiv.org/abs/2104.04473 sec. 5.1): forward = 2·N·T for the matmul parameters N
over T tokens, plus 4·b·s²·(heads·head_dim) per attention block; backward = 2x forward (HF
guide, "forward vs backward Execution Speed"); activation checkpointing adds one forward.

Time = matmul FLOPs / (peak rate of the precision × efficiency) + memory-bound work
(the elementwise kernels' traffic, counted and calibrated per family and class of step:
:mod:`advisor.engine.traffic`; the optimizer step; fp16 loss-scaling) / memory bandwidth + exposed
communication (activation offloading's copies beyond the compute they hide behind). On tensor cores the matmuls'
efficiency is a roofline over the step's GEMM shapes at the GPU's ridge point, with the SMs a short GEMM leaves idle
(:mod:`advisor.engine.gemm`); elsewhere it grows with the tokens per micro-batch and the hidden size; it drops when
the tokens dimension is not a tensor-core multiple (NVIDIA "Tensor Core Requirements").

First calibration: the seeds' V100 bert-large runs (fp16 about 2x fp32, checkpointing about
20-30 % slower, accumulation close to a larger batch). Known limitations: no kernel-level
model; the efficiency curve is a fit, not a measurement on your GPU (``advisor validate`` measures).
"""

from __future__ import annotations

import math

from pydantic import BaseModel, Field

from advisor.engine.checkpointing import recompute_shares
from advisor.engine.gemm import SMS, fp8_speedup, roofline_share
from advisor.engine.local_calibration import LocalCalibration
from advisor.engine.memory import MemoryEstimate
from advisor.engine.traffic import elementwise_traffic_bytes
from advisor.engine.states import local_parameters
from probes.hardware import GPUInfo, HostInfo, PeakTflops
from probes.model import ModelProfile
from probes.adapters import adapter_parameters, adapts_experts
from advisor.engine.experts import (expert_gemm_efficiency, experts_in_fp32, loop_launch_seconds,
                                    merged_expert_traffic_bytes)
from advisor.core.kernels import Attention, Framework
from advisor.core.vocabulary import OPTIMIZER_SPECS, PARALLELISM_SPECS, Family, Method, Offload, Precision, Task, WeightsDtype
from advisor.core.plan import Plan

from advisor.engine.communication import (activation_offload_seconds, communication_seconds, model_parallel_seconds,
                                          offload_seconds)
from advisor.engine.overheads import dequant_seconds, launch_floor_seconds

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


class SpeedEstimate(BaseModel):
    """Time and throughput of one optimizer step (all GPUs together)."""

    step_time_s: float = Field(description="seconds per optimizer step (all micro-batches)")
    samples_per_s: float = Field(description="samples per second, all devices")
    tokens_per_s: float = Field(description="tokens per second, all devices")
    flops_per_step: float = Field(description="model FLOPs per optimizer step, recomputation excluded, all devices")
    mfu: float = Field(description="model FLOPs utilization: achieved model FLOP/s / peak FLOP/s of the precision")
    peak_flops_per_s: float = Field(description="peak FLOP/s of one device at the plan's precision")
    communication_s: float = Field(0.0, description="exposed communication per step, seconds")
    step_time_band: float | None = Field(None, description="the uncertainty of step_time_s, relative (0.2: ± 20 %): "
                                         "the published runs of the plan's class (method, sharding, GPU generation) "
                                         "scored leave-one-source-out; None on the CPU")
    local_calibration: LocalCalibration | None = Field(None, description="the correction of the runs measured on this "
                                                       "machine, when applied (the figures above include it); None: "
                                                       "the model's own figures")


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
            # fp32's rate alone and a gpt2 training step's matmuls at about 0.8x under autocast; with neither,
            # oneDNN converts bf16 to fp32 around every matmul: on a Xeon with AVX-512 but no AVX-512 BF16 the
            # matmuls ran at 0.28x fp32's rate and a gpt2 step at 0.49x (each the step ratio of one CPU, torch
            # 2.13, benchmarks/results/validate_cpu.md and its 2026-11-21 version)
            per_cycle *= 8 if "amx_bf16" in flags else 0.8 if "avx512_bf16" in flags else 0.5
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
#: tokens and hidden size of :func:`_efficiency`: 0.75 at h = 4096). Fitted jointly with :data:`BANDWIDTH_SHARE`, once
#: the memory-bound work was priced at the counted traffic (:mod:`advisor.engine.traffic`), on a grid of 0.75 / 0.80 /
#: 0.85 × 0.7 / 0.8 / 0.9 against the 47 published runs with tokens/s per GPU in ``benchmarks/published/*.jsonl`` (7
#: sources: flash-attention, fms-acceleration, NeMo AutoModel, NeMo, torchtitan A100 / H100 / H200; median predicted /
#: published 0.98, 47 of 47 within 1.25x; 44 before Liger's layers and interleaved pipelines were priced as such)
#: and the 13 plans of the H100 trials (``benchmarks/results/validate_h100-sxm.jsonl``: step time predicted / measured
#: median 0.95). 0.75 gave 0.94 and 0.99, 0.85 gave 1.02 and 0.92 with 45 within 1.25x; 0.85 with a 0.7 share did as
#: well (published 1.00, trials 0.97, 47) but sits above cuBLAS's 70-80 % below (``benchmarks/speed_fit.py``,
#: ``benchmarks/results/speed_fit.md``). (Before the traffic was counted, 0.75 had been fitted with a traffic 3-5x too
#: small.)
#: cuBLAS reaches 70-80 % of peak on large bf16 GEMMs (NVIDIA "Matrix Multiplication Background User's Guide",
#: https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/index.html), so this is a
#: plausible ceiling, not a free parameter. Leave-one-source-out (``benchmarks/loso.py``, the trials in every fit):
#: refitted without any one of the five sources with rates it moves to 0.85 with a 0.7 share (see above); each source
#: scored at its refit, the 47 runs give median 1.00, 47 within 1.25x (in-sample at 0.8 / 0.8: 0.98, 47).
#: Since the efficiency is a roofline over the GEMM shapes (:mod:`advisor.engine.gemm`, issue 43) instead of a fitted
#: saturation in tokens (half at 1.5e6 / h) and width (h / (h + 256)), the grid's choice is 0.8 / 0.8 with every
#: source in the fit and without any one of them (LOSO: median 0.99, 47 of 47 within 1.25x; speed ratios 44 of 44).
#: Refitted 2026-11-29 on the 83 rated runs of 12 sources (the Megatron-LM paper, Megatron-Bridge, torchtitan's
#: async-TP page added) and the H100 trials by the same criterion (``benchmarks/loso.py``), once the roofline takes a
#: tensor-parallel rank's own GEMM shapes (:func:`advisor.engine.gemm.gemm_shapes`, ``split``): 0.75 with a 0.8
#: share, 89 within 1.25x (0.8 / 0.8 also 89, median |log| 0.090 against 0.089); the refits without one source choose
#: 0.75 / 0.8 or 0.8 / 0.8. (Before the split, 0.7 / 0.9 for a day.) Back to 0.8 / 0.8 the same day, once the
#: published multi-node runs are priced with the network their sources state (torchtitan's "RDMA 400 Gb/s per GPU",
#: DGX H100's 400 Gb/s ConnectX-7 adapters; they had been priced at the catalog's 200 Gb/s HDR): 88 within 1.25x,
#: median |log| 0.081 against 0.75's 88 and 0.089. Back to 0.75 once NCCL's current constants and its tree all-reduce
#: priced the collectives (``advisor.engine.collectives``): 89 within 1.25x against 0.8's 87.
TENSOR16_TOP = 0.75
#: The same on Volta and Turing (first- and second-generation tensor cores), fitted to the seeds' V100 BERT runs
#: (HF guide, ../shared/seeds/003: fp16 "almost twice as fast" as fp32, checkpointing 20-30 % slower) — one source.
#: 0.50 under the former saturation curve; refitted to 0.25 under the roofline so that bert-large (4 x 512 tokens,
#: V100 16GB) keeps its figures: fp32 / fp16 step time 2.75 (was 2.82), checkpointing 1.31x, MFU 0.17.
TENSOR16_TOP_VOLTA = 0.25


def _efficiency(plan: Plan, model: ModelProfile, gpu: GPUInfo | None, seq_len: int) -> float:
    """Fraction of peak the matmuls reach: saturates with tokens per micro-batch and hidden size."""
    return _efficiency_rows(plan, model, gpu, plan.micro_batch_size * seq_len)


def _roofline_args(plan: Plan, gpu: GPUInfo) -> tuple[float, float, int | None]:
    """(top, ridge point in FLOP/B, SMs) of the GEMM roofline (:mod:`advisor.engine.gemm`) on ``gpu``."""
    peak, bandwidth = device_rates(plan, gpu, None)
    top = TENSOR16_TOP if gpu.cc >= (8, 0) else TENSOR16_TOP_VOLTA
    return top, peak / (bandwidth * BANDWIDTH_SHARE), SMS.get(gpu.catalog_id or "")


def _efficiency_rows(plan: Plan, model: ModelProfile, gpu: GPUInfo | None, tokens: float) -> float:
    """:func:`_efficiency` of the dense layers' GEMMs over ``tokens`` rows (also a routed expert's curve:
    :mod:`advisor.engine.experts`)."""
    h = model.hidden_size
    if gpu is None:
        # fitted to advisor validate on a 2-core Xeon (benchmarks/results/validate_cpu.md): fp32 trials of
        # gpt2, distilbert, bert-base and t5-small reached 31-65 % (median 44 %) of cores x clock x 64 FLOP/cycle
        return 0.50 * tokens / (tokens + 64)
    tensor16 = (plan.precision != Precision.FP32) and gpu.tensor_cores
    tf32 = plan.precision == Precision.FP32 and plan.tf32 and gpu.tf32
    if tensor16:  # a roofline over the step's GEMM shapes at this GPU's ridge point (advisor.engine.gemm)
        top, ridge, sms = _roofline_args(plan, gpu)
        eff = roofline_share(model, round(tokens), top, ridge, sms, experts=False, split=plan.tensor_parallel)
    else:
        top, half = (0.55, 0.75e6 / h) if tf32 else (0.75, 256.0)
        eff = top * tokens / (tokens + half) * h / (h + 256)
    if (tensor16 or tf32) and (round(tokens) % 8 or h % 8):
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


#: The share of the datasheet memory bandwidth that memory-bound work (elementwise traffic, 4-bit dequantization,
#: the optimizer's update) sustains: STREAM-like copies reach 80-90 % of HBM's peak. Fitted with :data:`TENSOR16_TOP`
#: (see there: 0.8 of 0.7 / 0.8 / 0.9; 0.9 put the H100 trials at 0.92 and 46 published runs within 1.25x; refitted
#: 2026-11-29 with it on 12 sources' runs: 0.8 again).
BANDWIDTH_SHARE = 0.8


def _attention_efficiency(plan: Plan, gpu: GPUInfo | None, seq_len: int, matmul_efficiency: float) -> float:
    """Fraction of the 16-bit peak the plan's attention kernel reaches, forward + backward
    (:class:`advisor.core.kernels.AttentionSpec`), rising with the sequence (FlashAttention-2 fig. 4-7: about 3/4 of its
    long-sequence rate at 512 tokens); the plan's matmul efficiency where the kernel has no figure (eager's batched
    GEMMs, fp32, the CPU)."""
    if gpu is None or plan.precision == Precision.FP32 or not gpu.tensor_cores:
        return matmul_efficiency
    table = dict(Attention.of(plan.attention).spec.efficiency)
    if gpu.cc[0] not in table:
        return matmul_efficiency
    return table[gpu.cc[0]] * seq_len / (seq_len + 256)


def _compute_seconds(model: ModelProfile, plan: Plan, seq_len: int, gpu: GPUInfo | None, peak: float,
                     attended: float | None, host: HostInfo | None = None) -> tuple[float, float]:
    """(matmul seconds of one micro-batch on one device, model FLOPs of that micro-batch).

    Linear layers: 2·N·T forward, twice that backward (frozen LoRA layers: activations' gradients only, plus the
    adapters' 6·A·T, Hu et al. sec. 4.2; routed experts under LoRA on them: their merged weight's gradient too,
    :mod:`advisor.engine.experts`); fp8 runs the blocks' linear layers (not the LM head, nor the routed experts' 3-D
    weights, which are not ``nn.Linear``) at :func:`advisor.engine.gemm.fp8_speedup`'s gain for their shapes. The routed experts' GEMMs run as the installed
    transformers runs them (grouped or a per-expert loop, in the weights' dtype):
    :func:`advisor.engine.experts.expert_gemm_efficiency`. Attention: forward + backward = 3x its forward at its
    kernel's efficiency. Checkpointing recomputes one forward, or its policy's share of it (:func:`recompute_shares`)."""
    b = plan.micro_batch_size
    attention = attention_forward_flops(model, b, seq_len, attended)
    linear = forward_flops(model, b, seq_len) - attention_forward_flops(model, b, seq_len)
    routed = 2.0 * (model.capacity_factor or 1.0) * model.routed_active_matmul_parameters * b * seq_len
    dense = linear - routed
    routed_passes = 3
    if Method.of(plan.method).spec.adapters:
        trained = adapter_parameters(model, plan.lora_rank, plan.lora_targets)
        routed_passes = 3 if adapts_experts(model, plan.lora_targets) else 2
        model_linear = 2 * dense + routed_passes * routed + 6.0 * trained * b * seq_len
    else:
        model_linear = 3 * linear
    recompute, attention_recompute = recompute_shares(model, plan)
    executed_dense = model_linear - routed_passes * routed + recompute * dense
    eff = _efficiency(plan, model, gpu, seq_len)
    if plan.fp8 and gpu is not None and gpu.tensor_cores:  # fp8's gain by GEMM shape (advisor.engine.gemm)
        head = 2.0 * model.vocab_size * model.hidden_size * b * seq_len if Task.of(model.task).language_modeling else 0
        share = max(dense - head, 0.0) / dense if dense else 0.0
        te = Framework.of(plan.framework) is Framework.MEGATRON  # Transformer Engine's layers: fused casts
        gain = fp8_speedup(model, b * seq_len, *_roofline_args(plan, gpu), te, plan.gradient_accumulation_steps,
                           plan.tensor_parallel)
        executed_dense *= (1 - share) + share / gain
    seconds = executed_dense / (peak * eff)
    if routed:
        seconds += (routed_passes + recompute) * routed / _expert_rate(model, plan, seq_len, gpu, host, peak)
    seconds += (3 + attention_recompute) * attention / (peak * _attention_efficiency(plan, gpu, seq_len, eff))
    return seconds, model_linear + 3 * attention


def _expert_rate(model: ModelProfile, plan: Plan, seq_len: int, gpu: GPUInfo | None, host: HostInfo | None,
                 peak: float) -> float:
    """FLOP/s the routed experts' GEMMs reach on one device: the peak of the dtype they run in (fp32 weights: TF32
    or fp32, :func:`advisor.engine.experts.experts_in_fp32`) times their efficiency."""
    runs = plan.model_copy(update={"precision": Precision.FP32.value}) if experts_in_fp32(plan) else plan
    rate = device_rates(runs, gpu, host)[0] if runs is not plan else peak
    return rate * expert_gemm_efficiency(model, plan, gpu, seq_len,
                                         lambda rows: _efficiency_rows(runs, model, gpu, rows))


def padded_row_len(mean_sample_len: int, seq_len: int, micro_batch: int) -> float:
    """Expected tokens per row of a micro-batch of ``micro_batch`` unpacked samples padded to its longest sample
    (the Trainer's ``DataCollatorWithPadding`` and TRL's ``DataCollatorForLanguageModeling`` pad each batch to
    its longest sample; Kundu et al. 2024, https://arxiv.org/abs/2407.09105, abstract), samples cut at ``seq_len``.

    Assumption, not a fit: sample lengths are exponential with mean ``mean_sample_len`` (right-skewed, as
    instruction and web text lengths are: Krell et al. 2021, https://arxiv.org/abs/2107.02027 fig. 1). The
    expected maximum of b such lengths cut at s is μ·Σ_{k=1..b} U^k / k with U = 1 − e^(−s/μ) (the integral of
    1 − (1 − e^(−x/μ))^b over [0, s]): one sample's own length at b = 1, μ·H_b (the harmonic number) for
    s ≫ μ, never above s. Returns tokens (float); ``seq_len`` when the samples fill it."""
    if mean_sample_len >= seq_len:
        return float(seq_len)
    u = 1.0 - math.exp(-seq_len / mean_sample_len)
    return min(mean_sample_len * sum(u ** k / k for k in range(1, micro_batch + 1)), float(seq_len))


def _row_len(plan: Plan, seq_len: int, mean_sample_len: int | None) -> int:
    """Tokens a row of the plan runs: ``seq_len`` when packed or full; unpacked, :func:`padded_row_len` rounded up
    to a multiple of 8 (the collators' ``pad_to_multiple_of``, which advisor sets to 8 or 64)."""
    if not mean_sample_len or plan.packing:
        return seq_len
    return min(seq_len, 8 * math.ceil(padded_row_len(mean_sample_len, seq_len, plan.micro_batch_size) / 8))


def estimate_speed(model: ModelProfile, plan: Plan, seq_len: int, memory: MemoryEstimate, gpu: GPUInfo | None,
                   host: HostInfo | None, nvlink: bool = False, nodes: int = 1,
                   inter_node_bytes_per_s: float | None = None, mean_sample_len: int | None = None) -> SpeedEstimate:
    """Estimate one optimizer step of ``plan``.

    Args:
        memory: the plan's memory estimate (its activation bytes drive the memory-bound time).
        nvlink: all GPUs of a node are NVLink-joined; nodes: number of nodes;
        inter_node_bytes_per_s: network bandwidth between nodes per node (default: InfiniBand HDR).
        mean_sample_len: average tokens per sample before padding (None: samples fill ``seq_len``). Unpacked rows
            carry one sample padded to its micro-batch's longest (:func:`padded_row_len`: the step runs rows of
            that expected length, while memory is planned for full ``seq_len`` rows, the longest a batch can
            be); packed rows (``plan.packing``) are full, their attention runs within documents of this length,
            and batch sizes count rows. ``tokens_per_s`` counts tokens, not padding.
    """
    peak, bandwidth = device_rates(plan, gpu, host)
    # a packed document longer than a row is cut across rows: a query attends within its row at most
    attended = min(mean_sample_len, seq_len) if plan.packing and mean_sample_len else None
    row = _row_len(plan, seq_len, mean_sample_len)
    tp, pp, cp = max(plan.tensor_parallel, 1), max(plan.pipeline_parallel, 1), max(plan.context_parallel, 1)
    compute, model_flops_micro = _compute_seconds(model, plan, row, gpu, peak, attended, host)
    compute /= tp * pp * cp  # context parallel: each rank its s/c queries against every key (ring attention)
    # LoRA on the routed experts: their merged weights' passes through HBM; the per-expert loop's launches (per device)
    compute += merged_expert_traffic_bytes(model, plan) / (bandwidth * BANDWIDTH_SHARE)
    compute += loop_launch_seconds(model, plan, gpu)
    method = Method.of(plan.method)
    trained = adapter_parameters(model, plan.lora_rank, plan.lora_targets) if method.spec.adapters \
        else model.num_parameters
    compute += dequant_seconds(model, plan, bandwidth * BANDWIDTH_SHARE)  # QLoRA's 4-bit base (engine/overheads.py)
    # tensor + sequence parallel split every activation of a layer (memory.py), the pipeline its layers
    act_traffic = elementwise_traffic_bytes(model, plan, row) / (pp * tp * cp)
    mp_comm = model_parallel_seconds(model, plan, row, gpu, nvlink, nodes, inter_node_bytes_per_s, compute)
    micro_time = compute + act_traffic / (bandwidth * BANDWIDTH_SHARE) + mp_comm
    if gpu is not None:  # the GPU waits on the CPU's launches when its kernels are shorter (engine/overheads.py)
        micro_time = max(micro_time, launch_floor_seconds(model, plan))
    micro_time += activation_offload_seconds(memory.activations_offloaded_bytes / pp, compute,
                                             recompute_shares(model, plan)[0], gpu)
    k = plan.gradient_accumulation_steps
    sharded = PARALLELISM_SPECS[plan.parallelism].stage
    params_here = trained / (tp * pp) / (plan.shard_group_size if sharded else 1)
    if plan.expert_parallel_size > 1 and not sharded and not method.spec.adapters:
        params_here = local_parameters(model, plan)  # each replica steps its own experts only
    optimizer_time = params_here * _optimizer_bytes_per_param(plan) / (bandwidth * BANDWIDTH_SHARE)
    if Offload.of(plan.offload).optimizer:
        optimizer_time = offload_seconds(model, plan, compute)
    comm = communication_seconds(model, plan, gpu, nvlink, nodes, inter_node_bytes_per_s, compute)
    # 1F1B pipeline: k micro-batches pass p stages; the bubble adds p − 1 stage times (Narayanan sec. 2.2.1), or
    # (p − 1)/v of them with v interleaved chunks a stage (sec. 2.2.2)
    passes = k + (pp - 1) / max(plan.virtual_pipeline, 1)
    step = passes * micro_time + optimizer_time + comm
    comm += passes * mp_comm  # reported: data-parallel sync + tensor / pipeline / expert exchanges
    rows = plan.global_batch_size
    useful = seq_len if plan.packing or not mean_sample_len else min(mean_sample_len, seq_len)
    samples = rows * (seq_len / mean_sample_len if attended else 1)
    flops_step = model_flops_micro * k * plan.data_parallel_size
    devices = plan.data_parallel_size * tp * pp * cp
    return SpeedEstimate(
        step_time_s=step, samples_per_s=samples / step, tokens_per_s=rows * useful / step,
        flops_per_step=flops_step, mfu=flops_step / (step * peak * devices),
        peak_flops_per_s=peak, communication_s=comm)
