"""Bytes moved between devices and to the host, in seconds: data-parallel collectives (DDP, ZeRO, FSDP), tensor and
pipeline parallel exchanges, and offloading to CPU RAM (states, parameters, activations) or NVMe. :mod:`advisor.engine.speed` adds them to a step.
"""

from __future__ import annotations

from advisor.engine.collectives import (DDP_BUCKET_BYTES, ZERO_BUCKET_ELEMENTS, all_reduce_seconds, blocks,
                                        bucket_calls, ring_latency_seconds, zero3_fetches, zero3_gathers)
from advisor.engine.states import adapter_rank_sizes, local_parameters
from probes.hardware import GPUInfo
from probes.model import ModelProfile
from advisor.core.units import gbit_to_bytes_per_s, gbyte_to_bytes_per_s
from advisor.core.vocabulary import DEFAULT_NETWORK, OPTIMIZER_SPECS, Method, Offload, Parallelism, Precision
from advisor.core.plan import Plan

PCIE_GBPS = {3: 12.0, 4: 24.0, 5: 48.0}  #: effective one-direction x16 bandwidth, GB/s


def _link_bandwidth(gpu: GPUInfo | None, nvlink: bool, nodes: int, inter_node_bytes_per_s: float | None = None) -> float:
    """Bus bandwidth for collectives, bytes/s: the slowest hop (inter-node, NVLink or PCIe). ``nvlink``: a ring
    through the node's GPUs runs over NVLink (``HardwareProfile.nvlink_ring``; bridged pairs do not).

    ``inter_node_bytes_per_s``: the network between nodes (``HardwareProfile.inter_node_bytes_per_s``;
    default: the catalog figure of :data:`advisor.core.vocabulary.DEFAULT_NETWORK`).
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
                     compute_s: float | None, call_s: float = 0.0, units: int = 1, buckets: int = 1,
                     gathers: int = 2, fetches: int = 1) -> float:
    """Exposed seconds of a sharded strategy's collectives per step inside its group (see
    :func:`communication_seconds`); ``one_pass``: seconds per byte of one reduce-scatter or all-gather; ``call_s``:
    the fixed latency of one call (:func:`advisor.engine.collectives.ring_latency_seconds`), paid per wrapped unit
    (``units``: FSDP's), per fetched submodule (``fetches``: ZeRO-3's, each of its ``gathers`` passes a micro-batch)
    or per bucket (``buckets``: ZeRO's gradient reduction)."""
    stage, fsdp = parallelism.stage, parallelism.fsdp
    zero3 = stage >= 3 and not fsdp
    gathers = gathers if zero3 else 2 if stage >= 3 else 1 if fsdp else 0  # parameter all-gathers per micro-batch
    per_micro = gathers * (one_pass * param_bytes + (fetches if zero3 else units) * call_s)
    reduce = one_pass * grad_bytes + (units if fsdp else buckets) * call_s
    if fsdp:  # sync_each_batch: a reduce-scatter every micro-batch, beside its backward
        return k * _exposed(per_micro + reduce, compute_s)
    if stage == 1:  # reduce at the boundary, then all-gather the updated partitions: both exposed
        return 2 * reduce
    seconds = k * _exposed(per_micro + reduce, compute_s)  # ZeRO-2 / 3: a reduce-scatter every micro-batch
    if stage == 2:
        seconds += one_pass * param_bytes + buckets * call_s  # the updated partitions, all-gathered after the step
    return seconds


def communication_seconds(model: ModelProfile, plan: Plan, gpu: GPUInfo | None, nvlink: bool, nodes: int,
                          inter_node_bytes_per_s: float | None = None,
                          compute_s_per_micro: float | None = None) -> float:
    """Exposed data-parallel communication per optimizer step, seconds, for what the emitted config runs.

    Ring collectives over n ranks move (n−1)/n of the buffer per device for a reduce-scatter or an all-gather and
    2·(n−1)/n for an all-reduce (ZeRO paper, https://arxiv.org/abs/1910.02054 sec. 7: DDP 2Ψ, ZeRO-3 3Ψ). With
    k micro-batches per step (S: gradient bytes, 16-bit under mixed precision; Ψ: 16-bit parameter bytes):

    - DP / DDP: every micro-batch but the last under ``no_sync`` (transformers ``Trainer._inner_training_loop``; DDP
      docs): one all-reduce per step, overlapped with the last backward. ZeRO-1 (DeepSpeed): gradients reduced at
      the accumulation boundary and the updated partitions all-gathered after the step: 2·(n−1)/n·S, not overlapped.
    - ZeRO-2: DeepSpeed reduce-scatters the gradients after every micro-batch, the Trainer does not skip it
      (DeepSpeed maintainers, https://github.com/deepspeedai/DeepSpeed/issues/2252), overlapped with the backward
      (``overlap_comm``); the parameter all-gather after the step is not.
    - ZeRO-3: every micro-batch all-gathers the parameters in forward and again in backward (a third time, to
      recompute a block past the reuse distance: :func:`advisor.engine.collectives.zero3_gathers`) and
      reduce-scatters the gradients: 3·(n−1)/n per micro-batch (about 1.5·k all-reduces), prefetched / overlapped.
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

    Every call pays NCCL's latency (:mod:`advisor.engine.collectives`); overlappable parts hide behind compute as
    :func:`_exposed` says (``compute_s_per_micro``: one micro-batch's compute, None: long enough)."""
    n = plan.shard_group_size  # the replicas and their context-parallel ranks reduce the gradients together
    parallelism = Parallelism.of(plan.parallelism)
    if n <= 1 or parallelism == Parallelism.NONE:
        return 0.0
    P = local_parameters(model, plan)  # its own slice; expert parallel: 1/e of the experts (DeepSpeed-MoE sec. 5)
    wide = parallelism.replicated or plan.precision == Precision.FP32
    grad_bytes, param_bytes = (4 if wide else 2) * P, (4 if plan.precision == Precision.FP32 else 2) * P
    adapters, elements = Method.of(plan.method).spec.adapters, P
    if adapters:  # only the adapters have gradients (fp32); a sharded frozen base is gathered like parameters
        (param_bytes, elements), grad_bytes = adapter_rank_sizes(model, plan), 4 * adapter_rank_sizes(model, plan)[1]
    k = plan.gradient_accumulation_steps
    if plan.pipeline_parallel > 1 and nodes % plan.pipeline_parallel == 0:
        nodes //= plan.pipeline_parallel  # the stages span the nodes: each data-parallel group is inside fewer
    hybrid = parallelism.spec.replicated_across_nodes and nodes > 1
    group = max(n // nodes, 1) if hybrid else n  # the ranks the sharded collectives run over
    bw = _link_bandwidth(gpu, nvlink, 1 if hybrid else nodes, inter_node_bytes_per_s)
    one_pass = (group - 1) / group / bw  # seconds per byte of one reduce-scatter or all-gather
    ring = (group, 1 if hybrid else min(nodes, group), nvlink)  # NCCL's ring: ranks, nodes, NVLink
    if parallelism.replicated or (adapters and parallelism.stage < 3):
        return _all_reduce_seconds(parallelism, bw, grad_bytes, ring, gpu, compute_s_per_micro)
    seconds = _sharded_seconds(parallelism, k, one_pass, grad_bytes, param_bytes, compute_s_per_micro,
                               ring_latency_seconds("all_gather", *ring), blocks(model),
                               bucket_calls(elements, ZERO_BUCKET_ELEMENTS),
                               zero3_gathers(P / blocks(model), plan.gradient_checkpointing), zero3_fetches(model))
    # HYBRID_SHARD: the node's GPUs share its network, the node sends a whole all-reduce's worth per micro-batch
    return seconds + (k * _exposed(_between_nodes(model, grad_bytes, gpu, nvlink, nodes, inter_node_bytes_per_s),
                                   compute_s_per_micro) if hybrid else 0.0)


def _cc(gpu: GPUInfo | None) -> tuple[int, int]:
    """The GPU's compute capability for NCCL's model (no GPU: a current one, 8.0)."""
    return gpu.cc if gpu is not None else (8, 0)


def _all_reduce_seconds(parallelism: Parallelism, bw: float, grad_bytes: float, ring: tuple[int, int, bool],
                        gpu: GPUInfo | None, compute_s: float | None) -> float:
    """Exposed seconds of a replicated strategy's one all-reduce per step (no_sync), in DDP's 25 MiB buckets, each
    an all-reduce over ``ring`` (ranks, nodes, NVLink) as NCCL picks its algorithm
    (:func:`advisor.engine.collectives.all_reduce_seconds`); DP scatters, replicates and gathers: 2.5x."""
    buckets = bucket_calls(grad_bytes, DDP_BUCKET_BYTES)
    total = buckets * all_reduce_seconds(grad_bytes / max(buckets, 1), bw, *ring, _cc(gpu))
    return _exposed(total, compute_s) * (2.5 if parallelism == Parallelism.DP else 1.0)


def _between_nodes(model: ModelProfile, grad_bytes: float, gpu: GPUInfo | None, nvlink: bool, nodes: int,
                   inter_node_bytes_per_s: float | None) -> float:
    """Seconds of HYBRID_SHARD's all-reduce between the nodes per micro-batch: the node's gradient shards over its
    network, one all-reduce per unit across ``nodes`` ranks, one a node
    (:func:`advisor.engine.collectives.all_reduce_seconds`)."""
    bw, units = _link_bandwidth(gpu, nvlink, nodes, inter_node_bytes_per_s), blocks(model)
    return units * all_reduce_seconds(grad_bytes / units, bw, nodes, nodes, nvlink, _cc(gpu))


def model_parallel_seconds(model: ModelProfile, plan: Plan, seq_len: int, gpu: GPUInfo | None, nvlink: bool,
                           nodes: int, inter_node_bytes_per_s: float | None = None,
                           compute_s: float | None = None) -> float:
    """Communication of tensor and pipeline parallelism per micro-batch and stage, seconds (not overlapped).

    Tensor parallel: 4 all-reduces of the b·s·h activations per layer (2 forward, 2 backward; Megatron-LM,
    Shoeybi et al. 2019, https://arxiv.org/abs/1909.08053 sec. 3) over the node's links. Pipeline
    parallel: the activations forward and their gradients backward across each stage boundary
    (Narayanan et al. 2021 sec. 3), over the network between nodes when the stages span nodes.

    Asynchronous tensor parallel (``plan.async_tp``: torchtitan's ``enable_async_tensor_parallel``, PyTorch's
    micro-pipelined all-gather-matmul and matmul-reduce-scatter under torch.compile, after Wang et al. 2023,
    "Overlap Communication with Dependent Computation via Decomposition", ASPLOS '23,
    https://doi.org/10.1145/3567955.3567959): each collective runs as t − 1 peer-to-peer steps beside the t partial
    matmuls, so only the first step's share (1/t) waits, and what exceeds the micro-batch's compute (``compute_s``;
    None: long enough).
    """
    tp, pp = max(plan.tensor_parallel, 1), max(plan.pipeline_parallel, 1)
    width = Precision.of(plan.precision).activation_bytes
    bsh = plan.micro_batch_size * seq_len * model.hidden_size * width
    seconds = 0.0
    if tp > 1:
        layers = (model.encoder_layers + model.decoder_layers) / pp
        seconds += 4 * layers * 2 * (tp - 1) / tp * bsh / _link_bandwidth(gpu, nvlink, 1)
        if plan.async_tp:
            seconds = max(seconds / tp, seconds - (compute_s if compute_s is not None else seconds))
    if pp > 1:  # each of a stage's v interleaved chunks sends and receives its own (Narayanan sec. 2.2.2)
        seconds += 2 * max(plan.virtual_pipeline, 1) * bsh / _link_bandwidth(gpu, nvlink, nodes if nodes > 1 else 1,
                                                                            inter_node_bytes_per_s)
    return (seconds + ring_attention_seconds(model, plan, seq_len, gpu, nvlink)
            + all_to_all_seconds(model, plan, seq_len, gpu, nvlink, nodes, inter_node_bytes_per_s))


def ring_attention_seconds(model: ModelProfile, plan: Plan, seq_len: int, gpu: GPUInfo | None, nvlink: bool) -> float:
    """Context parallelism's key / value exchange per micro-batch and stage, seconds (counted as not overlapped).

    Ring attention (Liu et al. 2023, https://arxiv.org/abs/2310.01889 sec. 3; torch's ``context_parallel`` as
    torchtitan runs it, https://pytorch.org/tutorials/prototype/context_parallel.html) passes each rank's keys and
    values around the c ranks of the ring: c − 1 hops of b·(s/c)·2·kv elements a layer in the forward, and in the
    backward the keys and values again with their gradients (twice that), once more when checkpointing recomputes
    the forward. The ring stays inside a node (NVLink or PCIe). Assumption: no overlap with the attention compute,
    which the ring's design hides it behind on long sequences: an upper bound of the exposed time.
    """
    cp = max(plan.context_parallel, 1)
    if cp <= 1:
        return 0.0
    width = Precision.of(plan.precision).activation_bytes
    kv = 2 * model.num_key_value_heads * model.head_dim
    passes = 4 if plan.gradient_checkpointing else 3
    layers = (model.encoder_layers + model.decoder_layers) / max(plan.pipeline_parallel, 1)
    volume = passes * layers * (cp - 1) / cp * plan.micro_batch_size * seq_len * kv * width
    return volume / _link_bandwidth(gpu, nvlink, 1)


def all_to_all_seconds(model: ModelProfile, plan: Plan, seq_len: int, gpu: GPUInfo | None, nvlink: bool,
                       nodes: int, inter_node_bytes_per_s: float | None = None) -> float:
    """Expert parallelism's token exchange per micro-batch and stage, seconds (not overlapped).

    Each MoE block sends every token's hidden state to its k experts' ranks and back: an all-to-all dispatch and
    an all-to-all combine in the forward, two more in the backward for their gradients, and two more when
    checkpointing recomputes the forward (GShard, Lepikhin et al. 2020, https://arxiv.org/abs/2006.16668 sec. 2.2;
    DeepSpeed-MoE, https://arxiv.org/abs/2201.05596 sec. 5; Megatron-Core MoE, "Expert parallelism",
    https://docs.nvidia.com/megatron-core/developer-guide/latest/api-guide/moe.html). Each moves b·s·k·h elements
    (padded by the capacity factor) of which (e − 1)/e leave the GPU. An all-to-all is point to point: unlike a
    ring, every GPU's share for another node crosses the network itself (NCCL's send / recv over the GPU's nearest
    NIC). An expert-parallel group of e ranks laid out node by node has g = min(e, GPUs a node) in each node: a GPU
    sends (g − 1)/e of its tokens over NVLink (or PCIe) and (e − g)/e to other nodes, and the node's g GPUs share
    its network, so the exchange takes the longer of the two: g·(e − g)/e of a GPU's bytes over the node's network
    (``inter_node_bytes_per_s``). Assumptions: all-to-all reaches the links' one-direction bandwidth, as the ring
    collectives do here; routing is balanced; a dispatcher that sends a token once per remote node and forwards it
    inside the node (DeepEP, Megatron-Core's "flex" dispatcher) moves less and is not priced.
    """
    ep = plan.expert_parallel_size
    if ep <= 1 or not model.moe_layers:
        return 0.0
    width = Precision.of(plan.precision).activation_bytes
    tokens = plan.micro_batch_size * seq_len * max(model.experts_per_token, 1) * (model.capacity_factor or 1.0)
    exchanges = 6 if plan.gradient_checkpointing else 4
    layers = model.moe_layers / max(plan.pipeline_parallel, 1)
    sent = exchanges * layers * tokens * model.hidden_size * width  # bytes a GPU's tokens take, all ranks together
    g = min(max(plan.num_gpus // max(nodes, 1), 1), ep)  # the group's GPUs in one node
    inside = sent * (g - 1) / ep / _link_bandwidth(gpu, nvlink, 1)
    if g >= ep:
        return inside
    between = g * sent * (ep - g) / ep / _link_bandwidth(gpu, nvlink, nodes, inter_node_bytes_per_s)
    return max(inside, between)


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


def parameter_fetch_seconds(model: ModelProfile, plan: Plan) -> float:
    """Seconds one pass (a forward or a backward) spends fetching this GPU's parameter shard from CPU RAM over PCIe
    under parameter offload (0 without it): 16-bit parameters, or the frozen base's stored bytes (NF4 under QLoRA)
    under LoRA / QLoRA."""
    offload = Offload.of(plan.offload)
    if not offload.parameters and not (offload.optimizer and Method.of(plan.method).spec.adapters):
        return 0.0
    pcie = PCIE_GBPS[4] * 1e9
    dp = max(plan.data_parallel_size, 1)
    if Method.of(plan.method).spec.adapters:
        return adapter_rank_sizes(model, plan)[0] / dp / pcie
    return 2 * model.num_parameters / plan.model_parallel_size / dp / pcie


def offload_seconds(model: ModelProfile, plan: Plan, compute_s_per_micro: float) -> float:
    """Time offloading adds to one optimizer step, seconds.

    Optimizer offload (ZeRO-Offload, Ren et al. 2021 sec. 4): the 16-bit gradients go to the CPU and the updated
    16-bit parameters come back over PCIe (2 + 2 B/param of this GPU's shard), and the CPU runs the step
    (:data:`HOST_OPTIMIZER_BYTES_PER_S`). Parameter offload (ZeRO-3 / FSDP CPUOffload): every micro-batch fetches
    the parameters for the forward and again for the backward (2 x 2 B/param), half of it hidden behind compute
    by prefetching. NVMe (ZeRO-Infinity): the states are read and written once per step and the parameters
    read per micro-batch at :data:`NVME_BYTES_PER_S`. Under LoRA / QLoRA the parameters fetched are the frozen
    base's stored bytes (NF4 under QLoRA) and the CPU steps the adapters only.
    """
    offload = Offload.of(plan.offload)
    if not offload.optimizer:
        return 0.0
    P = model.num_parameters / plan.model_parallel_size / max(plan.data_parallel_size, 1)
    pcie = PCIE_GBPS[4] * 1e9
    method = Method.of(plan.method)
    if method.spec.adapters:  # the frozen base's shard (its stored bytes) up twice a micro-batch; the adapters step
        A = adapter_rank_sizes(model, plan)[1] / max(plan.data_parallel_size, 1)  # this GPU's shard
        per_micro = 2 * parameter_fetch_seconds(model, plan)
        exposed = max(per_micro - 0.5 * compute_s_per_micro, 0.5 * per_micro)
        return 8 * A / pcie + A * HOST_OPTIMIZER_BYTES_PER_PARAM / HOST_OPTIMIZER_BYTES_PER_S + (
            plan.gradient_accumulation_steps * exposed)
    seconds = 4 * P / pcie + P * HOST_OPTIMIZER_BYTES_PER_PARAM / HOST_OPTIMIZER_BYTES_PER_S
    per_micro = 2 * parameter_fetch_seconds(model, plan)  # up for the forward and again for the backward
    if offload.nvme:
        state_bytes = (4 + 4 + (OPTIMIZER_SPECS[plan.optimizer].state_bytes_per_param or 4)) * P
        seconds += 2 * state_bytes / NVME_BYTES_PER_S
        per_micro = max(per_micro, 2 * 2 * P / NVME_BYTES_PER_S)
    exposed = max(per_micro - 0.5 * compute_s_per_micro, 0.5 * per_micro)
    return seconds + plan.gradient_accumulation_steps * exposed


def activation_offload_seconds(offloaded_bytes: float, compute_s: float, recompute_share: float,
                               gpu: GPUInfo | None) -> float:
    """Time activation offloading adds to one micro-batch, seconds: the saved tensors go to pinned CPU RAM during
    the forward and come back during the backward, each way over the GPU's PCIe link (:data:`PCIE_GBPS`, one
    direction), on a side stream (TRL's / torchtune's ``OffloadActivations`` with ``use_streams``,
    ``trl/models/activation_offloading.py``, TRL 1.16). The forward's copies hide behind the forward's compute,
    1 / (3 + r) of ``compute_s`` (r: the recomputation of checkpointing), and what exceeds it is exposed: the pack
    hook copies on the side stream and keeps the latest tensors alive until their copy is done. The backward's are
    exposed in full: the unpack hook starts a tensor's copy back when autograd asks for that tensor and makes the
    compute stream wait for it at once (``s0.wait_stream(s1)``), with no prefetch.

    Checked on this project's H100 (``benchmarks/results/validate_h100-sxm.jsonl``, Llama-3.1-8B LoRA under
    checkpointing, 1.04 and 2.08 GB offloaded per micro-batch of 2 and 4 rows): offloading added 77 and 167 ms per
    micro-batch (12.7 and 14.5 % of the step), where hidden copies priced nothing and this prices 22 and 43 ms; the
    rest (the copies ran as if at 13-14 GB/s, or TRL's per-tensor hooks and stream waits cost it) is not modelled.

    Args:
        offloaded_bytes: :func:`advisor.engine.memory.offloaded_activation_bytes` of one micro-batch.
        compute_s: the micro-batch's compute on one device (forward, backward and recomputation), seconds.
        recompute_share: the forward's share the backward computes again (0 without checkpointing, 1 under full).
        gpu: the device (None: no PCIe link, nothing to add).
    """
    if not offloaded_bytes or gpu is None:
        return 0.0
    gen = gpu.pcie_generation or 4
    one_way = offloaded_bytes / gbyte_to_bytes_per_s(PCIE_GBPS.get(gen, PCIE_GBPS[4]))
    return max(one_way - compute_s / (3 + recompute_share), 0.0) + one_way
