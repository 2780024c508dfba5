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

from advisor.engine.memory import MemoryEstimate
from advisor.engine.states import local_parameters
from probes.hardware import GPUInfo, HostInfo, PeakTflops
from probes.model import ModelProfile
from probes.units import gbit_to_bytes_per_s, gbyte_to_bytes_per_s
from probes.adapters import adapter_parameters, frozen_base_bytes, quantized_parameters
from probes.vocabulary import (DEFAULT_NETWORK, OPTIMIZER_SPECS, PARALLELISM_SPECS, Family, Method, Offload,
                               Parallelism, Precision, WeightsDtype)
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


def forward_flops(model: ModelProfile, micro_batch: int, seq_len: int) -> float:
    """Forward FLOPs of one micro-batch: 2·N·T plus self- (and cross-) attention score/value matmuls.

    N is the matmul parameters one token uses: for a mixture of experts the k routed experts it is sent
    to, the shared experts and the routers (2·E·h FLOPs per token and MoE block), not every expert (Fedus
    et al. 2021, https://arxiv.org/abs/2101.03961 sec. 2). With an expert capacity factor C the experts run
    on buffers padded to C times their share of the tokens, so the routed experts' FLOPs scale by C (sec. 2.2).
    """
    tokens = micro_batch * seq_len
    inner = model.num_attention_heads * model.head_dim
    attention_blocks = model.encoder_layers + model.decoder_layers * (2 if model.family == Family.ENCODER_DECODER else 1)
    n = model.active_matmul_parameters + ((model.capacity_factor or 1.0) - 1.0) * model.routed_active_matmul_parameters
    return 2.0 * n * tokens + 4.0 * micro_batch * seq_len**2 * inner * attention_blocks


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
        top, half = 0.50, 1.5e6 / h
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
    """Bus bandwidth for collectives, bytes/s: the slowest hop (inter-node, NVLink or PCIe).

    ``inter_node_bytes_per_s``: the network between nodes (``HardwareProfile.inter_node_bytes_per_s``;
    default: the catalog figure of :data:`probes.vocabulary.DEFAULT_NETWORK`).
    """
    if nodes > 1:
        return inter_node_bytes_per_s or gbit_to_bytes_per_s(DEFAULT_NETWORK.gbit_s)
    if nvlink and gpu is not None and gpu.nvlink_bandwidth_gbps:
        return gpu.nvlink_bandwidth_gbps / 2 * 1e9  # one direction
    gen = gpu.pcie_generation if gpu is not None and gpu.pcie_generation else 4
    return gbyte_to_bytes_per_s(PCIE_GBPS.get(gen, 24.0))


def _frozen_weight_bytes(model: ModelProfile, plan: Plan) -> float:
    """Bytes of one model replica's frozen base weights (LoRA: the weights' dtype; QLoRA: 4-bit blocks)."""
    base = frozen_base_bytes(model, Method.of(plan.method).spec.quantized_base, WeightsDtype.of(plan.weights_dtype).bytes)
    return base / plan.model_parallel_size


def communication_seconds(model: ModelProfile, plan: Plan, gpu: GPUInfo | None, nvlink: bool, nodes: int,
                          inter_node_bytes_per_s: float | None = None) -> float:
    """Exposed communication per optimizer step (ZeRO paper sec. 7: DDP all-reduce 2Ψ, ZeRO-3 3Ψ).

    Ring all-reduce moves 2·(n−1)/n of the gradient bytes per device; about half of it overlaps
    with the backward pass (DDP buckets); ZeRO-3 / FSDP FULL_SHARD also all-gather parameters every
    micro-batch (1.5x). FSDP HYBRID_SHARD does that inside a node over its links and only
    all-reduces each GPU's shard (1/GPUs-per-node of the gradients) between nodes (PyTorch FSDP
    docs, ShardingStrategy.HYBRID_SHARD). Inter-node bandwidth: ``inter_node_bytes_per_s``
    (``--interconnect`` / ``--inter-node-gbps``), else 200 Gb/s InfiniBand HDR.
    """
    n = plan.data_parallel_size
    parallelism = Parallelism.of(plan.parallelism)
    if n <= 1 or parallelism == Parallelism.NONE:
        return 0.0
    # each GPU syncs its own slice of the model; under expert parallelism its experts only within their
    # expert-data-parallel group: about 1/e of the routed experts' bytes per GPU (DeepSpeed-MoE sec. 5)
    P = local_parameters(model, plan)
    grad_bytes = (4 if parallelism.replicated or plan.precision == Precision.FP32 else 2) * P
    if Method.of(plan.method).spec.adapters:  # only the adapters have gradients (fp32)
        grad_bytes = 4 * adapter_parameters(model, plan.lora_rank, plan.lora_targets) // plan.model_parallel_size
    k = plan.gradient_accumulation_steps
    if plan.pipeline_parallel > 1 and nodes % plan.pipeline_parallel == 0:
        nodes //= plan.pipeline_parallel  # the stages span the nodes: each data-parallel group is inside fewer
    if parallelism.spec.replicated_across_nodes and nodes > 1:
        per_node = max(n // nodes, 1)
        intra = _link_bandwidth(gpu, nvlink, 1)
        ring_in = 2 * (per_node - 1) / per_node
        seconds = 1.5 * ring_in * grad_bytes / intra + (k - 1) * ring_in / 2 * grad_bytes / intra
        seconds += 2 * (nodes - 1) / nodes * grad_bytes / per_node / _link_bandwidth(gpu, nvlink, nodes,
                                                                                    inter_node_bytes_per_s)
    else:
        bw = _link_bandwidth(gpu, nvlink, nodes, inter_node_bytes_per_s)
        ring = 2 * (n - 1) / n
        seconds = ring * grad_bytes / bw
        if parallelism == Parallelism.DP:
            seconds *= 2.5  # scatter inputs, replicate the model, gather outputs: 5 exchanges per batch
        if parallelism.stage == 3 and Method.of(plan.method).spec.adapters:
            # frozen base shards are all-gathered for every micro-batch's forward and backward
            seconds += k * 2 * (n - 1) / n * _frozen_weight_bytes(model, plan) / bw
        elif parallelism.stage == 3:
            seconds *= 1.5
            seconds += (k - 1) * ring / 2 * grad_bytes / bw
    return 0.5 * seconds


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
    return seconds + all_to_all_seconds(model, plan, seq_len, gpu, nvlink, nodes, inter_node_bytes_per_s)


def all_to_all_seconds(model: ModelProfile, plan: Plan, seq_len: int, gpu: GPUInfo | None, nvlink: bool,
                       nodes: int, inter_node_bytes_per_s: float | None = None) -> float:
    """Expert parallelism's token exchange per micro-batch and stage, seconds (not overlapped).

    Each MoE block sends every token's hidden state to its k experts' ranks and back: an all-to-all dispatch and
    an all-to-all combine in the forward, two more in the backward for their gradients, and two more when
    checkpointing recomputes the forward (GShard, Lepikhin et al. 2020, https://arxiv.org/abs/2006.16668 sec. 2.2;
    DeepSpeed-MoE, https://arxiv.org/abs/2201.05596 sec. 5; Megatron-Core MoE, "Expert parallelism",
    https://docs.nvidia.com/megatron-core/developer-guide/latest/api-guide/moe.html). Each moves b·s·k·h elements
    (padded by the capacity factor) of which (e − 1)/e leave the GPU, over NVLink when the expert-parallel group
    fits in a node, else over the network. Assumption: all-to-all reaches the link's one-direction bandwidth, as
    the ring collectives do here; load imbalance between experts is not modelled.
    """
    ep = plan.expert_parallel_size
    if ep <= 1 or not model.moe_layers:
        return 0.0
    width = Precision.of(plan.precision).activation_bytes
    tokens = plan.micro_batch_size * seq_len * max(model.experts_per_token, 1) * (model.capacity_factor or 1.0)
    exchanges = 6 if plan.gradient_checkpointing else 4
    per_node = max(plan.num_gpus // max(nodes, 1), 1)
    bw = _link_bandwidth(gpu, nvlink, 1 if ep <= per_node else nodes, inter_node_bytes_per_s)
    layers = model.moe_layers / max(plan.pipeline_parallel, 1)
    return exchanges * layers * (ep - 1) / ep * tokens * model.hidden_size * width / bw


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


def estimate_speed(model: ModelProfile, plan: Plan, seq_len: int, memory: MemoryEstimate, gpu: GPUInfo | None,
                   host: HostInfo | None, nvlink: bool = False, nodes: int = 1,
                   inter_node_bytes_per_s: float | None = None) -> SpeedEstimate:
    """Estimate one optimizer step of ``plan``.

    Args:
        memory: the plan's memory estimate (its activation bytes drive the memory-bound time).
        nvlink: all GPUs of a node are NVLink-joined; nodes: number of nodes;
        inter_node_bytes_per_s: network bandwidth between nodes per node (default: InfiniBand HDR).
    """
    peak, bandwidth = device_rates(plan, gpu, host)
    fwd = forward_flops(model, plan.micro_batch_size, seq_len)
    method = Method.of(plan.method)
    model_flops_micro = 3 * fwd
    trained = model.num_parameters
    if method.spec.adapters:
        # frozen weights get no weight gradients: the backward computes only the activations' gradients
        # (one forward's worth of matmuls instead of two), plus the adapters' own 6·A·T (Hu et al. sec. 4.2)
        trained = adapter_parameters(model, plan.lora_rank, plan.lora_targets)
        model_flops_micro = 2 * fwd + 6.0 * trained * plan.micro_batch_size * seq_len
    executed = model_flops_micro + (fwd if plan.gradient_checkpointing else 0)
    tp, pp = max(plan.tensor_parallel, 1), max(plan.pipeline_parallel, 1)
    compute = executed / (tp * pp) / (peak * _efficiency(plan, model, gpu, seq_len))
    if method.spec.quantized_base:
        passes = 3 if plan.gradient_checkpointing else 2
        compute += passes * quantized_parameters(model) / (tp * pp) * DEQUANT_BYTES_PER_PARAM / (bandwidth * 0.7)
    act_traffic = memory.components.activations_bytes * (4.0 if plan.gradient_checkpointing else 3.0) / pp
    mp_comm = model_parallel_seconds(model, plan, seq_len, gpu, nvlink, nodes, inter_node_bytes_per_s)
    micro_time = compute + act_traffic / (bandwidth * 0.7) + mp_comm
    k = plan.gradient_accumulation_steps
    sharded = PARALLELISM_SPECS[plan.parallelism].stage
    params_here = trained / (tp * pp) / (plan.data_parallel_size if sharded else 1)
    if plan.expert_parallel_size > 1 and not sharded and not method.spec.adapters:
        params_here = local_parameters(model, plan)  # each replica steps its own experts only
    optimizer_time = params_here * _optimizer_bytes_per_param(plan) / (bandwidth * 0.7)
    if Offload.of(plan.offload).optimizer:
        optimizer_time = offload_seconds(model, plan, compute)
    comm = communication_seconds(model, plan, gpu, nvlink, nodes, inter_node_bytes_per_s)
    # 1F1B pipeline: k micro-batches pass p stages; the bubble adds p − 1 stage times (Narayanan sec. 2.2.1)
    step = (k + pp - 1) * micro_time + optimizer_time + comm
    comm += (k + pp - 1) * mp_comm  # reported: data-parallel sync + tensor / pipeline / expert exchanges
    samples = plan.global_batch_size
    flops_step = model_flops_micro * k * plan.data_parallel_size
    devices = plan.data_parallel_size * tp * pp
    return SpeedEstimate(
        step_time_s=step, samples_per_s=samples / step, tokens_per_s=samples * seq_len / step,
        flops_per_step=flops_step, mfu=flops_step / (step * peak * devices),
        peak_flops_per_s=peak, communication_s=comm)
