"""Model states per device: parameters, gradients, optimizer states and the step's temporaries, for full
fine-tuning (fp32 AMP masters or pure bf16), LoRA / QLoRA adapters, ZeRO / FSDP sharding and offload.

ZeRO stages partition model states as the ZeRO paper's sec. 5 (https://arxiv.org/abs/1910.02054):
16-bit parameters and gradients (2 + 2 B/param) plus K = 4 + states B/param of fp32 master
weights and optimizer states, divided by N_d from stage 1 (states), 2 (+ gradients), 3 (+ params).
FSDP holds its root unit and two blocks unsharded at the peak (:func:`fsdp_gathered_bytes`); Megatron's
optimizer keeps fp32 gradients beside 16-bit parameters (:func:`_megatron_states`).
Offloaded states move to the host's RAM (:func:`host_bytes`). Expert parallelism splits a mixture of
experts' routed experts over its ranks (:func:`local_parameters`); the optimizer step in backward keeps about
one layer's gradients (:func:`_optimizer_in_backward`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from operator import itemgetter

from probes.adapters import (adapter_matrix_elements, adapter_parameters, frozen_base_bytes, head_matmul_parameters,
                             largest_block_matrix, quantized_parameters)
from advisor.core.kernels import Framework
from probes.model import ModelProfile
from advisor.core.vocabulary import Method, Offload, Optimizer, Parallelism, Precision, WeightsDtype
from advisor.core.dimensions import NOT_STATES
from advisor.core.plan import Plan


def _optimizer_state_bytes(model: ModelProfile, optimizer: Optimizer, weights: WeightsDtype) -> int:
    """The whole model's optimizer state, bytes (torch AdamW's states take the weights' dtype)."""
    per_param = optimizer.spec.state_bytes_per_param
    if per_param is None:  # factored second moments, fp32
        return 4 * model.factored_statistics_elements
    if optimizer.spec.states_follow_weights:
        per_param = per_param * weights.bytes / 4
    return int(per_param * model.num_parameters)


@dataclass(frozen=True)
class ModelStates:
    """Model-state bytes per device: the parameters as held (``weights``), autocast's 16-bit copies (and
    QLoRA's dequantized layer), gradients, DDP's bucket copy, optimizer states and the optimizer step's
    temporaries."""

    weights: int
    copies16: int
    grads: int
    buckets: int
    optimizer: int
    step_temp: int


#: Bytes DeepSpeed's ``overlap_comm`` holds per bucket element: about 4.5 buffers of the bucket sizes, 16-bit
#: ("overlap_comm uses 4.5x the allgather_bucket_size and reduce_bucket_size values", the transformers DeepSpeed
#: guide, https://huggingface.co/docs/transformers/deepspeed, ZeRO-2: 5e8 each → 9 GB).
OVERLAP_COMM_BYTES_PER_ELEMENT = 4.5 * 2


def zero_bucket_elements(model: ModelProfile) -> int:
    """The bucket size, in elements, advisor emits for ``reduce_bucket_size`` and ``allgather_bucket_size`` (and
    0.9 of it for ``stage3_prefetch_bucket_size``), and the memory model prices: hidden_size², the Trainer's
    ``"auto"`` (transformers DeepSpeed guide, "ZeRO-3": ``reduce_bucket_size`` = hidden_size·hidden_size,
    ``stage3_prefetch_bucket_size`` = 0.9·hidden_size·hidden_size), within DeepSpeed's default 5e8."""
    return min(model.hidden_size**2, 500_000_000)


def root_parameters(model: ModelProfile) -> int:
    """Parameters outside the transformer blocks that FSDP wraps in its root unit: the token embedding and, untied,
    the LM head (position embeddings, the final norm and small task heads are left in the blocks' average)."""
    return model.vocab_size * model.hidden_size + (0 if model.tied_embeddings else head_matmul_parameters(model))


def fsdp_gathered_bytes(model: ModelProfile, root_bytes: int, blocks_bytes: int) -> int:
    """Bytes of unsharded parameters FSDP holds at the step's peak, given the root unit's and all blocks' bytes as
    gathered (this device's tensor / pipeline share): the root unit, which FSDP does not reshard after the forward,
    its parameters being needed at once by the backward (FSDP2's ``fully_shard``, parameter ``reshard_after_forward``,
    https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html; FSDP1's post-forward likewise skips the root),
    plus two transformer-block units, the one computing and the one prefetched (the Trainer's and LitGPT's FSDP wrap
    each block, ``transformer_auto_wrap_policy``; ``limit_all_gathers`` keeps at most two blocks' all-gathers in
    flight: PyTorch FSDP docs, https://pytorch.org/docs/stable/fsdp.html, ``limit_all_gathers`` and
    ``backward_prefetch``). Checked against the published FSDP runs (``benchmarks/published.py``): the 20 FSDP1 runs'
    median |error| went from 8.9 % (two of the largest tensors) to 4.1 %."""
    blocks = max(model.num_layers, 1)
    return int(root_bytes + 2 * blocks_bytes / blocks)


def local_parameters(model: ModelProfile, plan: Plan) -> int:
    """Parameters one device holds unsharded, after the tensor / pipeline split: with expert parallelism e each
    rank of an expert-parallel group keeps 1/e of the routed experts and every other parameter whole (GShard,
    Lepikhin et al. 2020, https://arxiv.org/abs/2006.16668 sec. 2.2; DeepSpeed-MoE, Rajbhandari et al. 2022,
    https://arxiv.org/abs/2201.05596 sec. 5: expert + data parallelism). Sharded states (ZeRO / FSDP) divide by
    the data-parallel size either way: an expert's shards spread over its n/e expert-data-parallel ranks."""
    split = plan.model_parallel_size
    P = model.num_parameters // split
    ep = plan.expert_parallel_size
    if ep <= 1:
        return P
    routed = model.routed_parameters // split
    return P - routed + routed // ep


def _optimizer_in_backward(states: ModelStates, plan: Plan, model: ModelProfile, P: int, largest: int) -> ModelStates:
    """The optimizer step fused into backward: each parameter steps in its post-accumulate-grad hook and its gradient
    is freed, so no full set of gradients (nor DDP's buckets) is ever held, only about one block's (torchtune
    ``optimizer_in_bwd``; PyTorch tutorial "How to save memory by fusing the optimizer step into the backward pass",
    https://pytorch.org/tutorials/intermediate/optimizer_step_in_backward_tutorial.html). Each step runs on one
    tensor, so the foreach temporaries are one tensor's."""
    width = 2 if plan.precision != Precision.FP32 and Parallelism.of(plan.parallelism).stage else (
        WeightsDtype.of(plan.weights_dtype).bytes)
    layer = max(P // max(model.num_layers, 1), largest)
    step_temp = Optimizer.of(plan.optimizer).step_temporary_bytes(plan.device, largest, largest)
    return replace(states, grads=min(states.grads, width * layer), buckets=0, step_temp=step_temp)


def _sharded_states(plan: Plan, stage: int, n: int, P: int, states_full: int, largest: int, bucket: int,
                    local: int, model: ModelProfile, root: int) -> ModelStates:
    """ZeRO: 16-bit params and grads on the GPU; fp32 masters + states partitioned (K = 4 + states) over ``n``.

    FSDP's mixed precision keeps fp32 parameter shards instead of 16-bit shards + fp32 masters: within
    2 bytes/param/n of ZeRO's figure, so its strategies use their ZeRO counterpart's. Pure bf16 weights
    (FSDP without a mixed-precision policy) keep no fp32 masters.

    DeepSpeed's own buffers (mixed precision): the fp32 gradient partition the optimizer steps on, 4 B/param/n
    (``single_partition_of_fp32_groups[i].grad`` in ``stage_1_and_2.py``, the fp32 partition's ``grad`` in
    ``stage3.py``; DeepSpeed's estimators count it: 16 B/param/n at stages 1-2, 18 at stage 3), and
    ``overlap_comm``'s buckets (:data:`OVERLAP_COMM_BYTES_PER_ELEMENT` × (reduce + all-gather bucket), at stage 3
    the reduce bucket only: the prefetched layers are the gathered parameters below).
    FSDP with accumulation runs with ``sync_each_batch`` (emitted; see
    :func:`advisor.engine.speed.communication_seconds`): its gradients stay sharded between micro-batches.
    ``local``: the parameters a device holds unsharded (expert parallelism: :func:`local_parameters`). Gathered parameters at stage 3: FSDP's units (:func:`fsdp_gathered_bytes`, with ``model`` and ``root``,
    the root unit's parameters on this device), ZeRO-3's about two of the largest tensors."""
    mixed = (plan.precision != Precision.FP32)
    offload = Offload.of(plan.offload)
    parallelism = Parallelism.of(plan.parallelism)
    low = 2 if mixed else 4
    masters = 4 * P if mixed and plan.weights_dtype == WeightsDtype.FP32 else 0
    params = low * P // n if stage >= 3 else low * local
    grads = low * P // n if stage >= 2 else low * local
    states = (masters + states_full) // n
    buckets = 0
    if parallelism.deepspeed and mixed and masters:
        grads += 4 * P // n  # the fp32 gradient partition
        buckets = int(OVERLAP_COMM_BYTES_PER_ELEMENT * bucket * (1 if stage >= 3 else 2))
    if offload.optimizer:
        # ZeRO-Offload copies each gradient bucket to the CPU as backward produces it (Ren et al. 2021 sec. 4.1;
        # DeepSpeed's estimator counts no gradients on the GPU): about two buckets of the largest tensor stay
        states = 0
        grads = min(grads, 2 * low * largest)
    if offload.parameters:
        params = 0
    if stage >= 3 and parallelism.fsdp:
        params += fsdp_gathered_bytes(model, low * root, low * (local - root))
    elif stage >= 3:
        params += 2 * low * largest  # a gathered layer's parameters (ZeRO-3's prefetch keeps ~2)
    return ModelStates(weights=params, copies16=0, grads=grads, buckets=buckets, optimizer=states, step_temp=0)


def _megatron_buffers(plan: Plan, weights: WeightsDtype, parallelism: Parallelism) -> bool:
    """Whether a full fine-tuning plan keeps Megatron's buffers (:func:`_megatron_states`): Megatron-style code in
    mixed precision with 16-bit parameters (bf16 weights, or a distributed optimizer's 16-bit working copy), without
    ZeRO-2 / ZeRO-3 / FSDP sharding (which Megatron's optimizer does not do)."""
    return (plan.framework == Framework.MEGATRON and plan.precision != Precision.FP32 and parallelism.stage <= 1
            and (parallelism.stage == 1 or weights == WeightsDtype.BF16))


def _megatron_states(plan: Plan, n: int, P: int, local: int, largest: int, states_fp32: int) -> ModelStates:
    """Megatron's mixed-precision buffers: 16-bit parameters, gradients accumulated and reduced in a contiguous fp32
    buffer (no separate bucket copy; ``accumulate_allreduce_grads_in_fp32``, on for bf16), fp32 master weights and
    the optimizer's fp32 states, sharded over the ``n`` data-parallel ranks by the distributed optimizer (``n`` = 1
    without it): 6 + 12/d bytes a parameter under Adam, 18 unsharded (Megatron Core user guide, "Distributed
    Optimizer", https://docs.nvidia.com/megatron-core/developer-guide/latest/distrib_optimizer.html, the table of
    bytes per parameter, "float16 param, fp32 grads"). ``states_fp32``: the optimizer's states over fp32 weights."""
    step_temp = Optimizer.of(plan.optimizer).step_temporary_bytes(plan.device, P // n, largest)
    return ModelStates(weights=2 * local, copies16=0, grads=4 * local, buckets=0,
                       optimizer=(4 * P + states_fp32) // n, step_temp=step_temp)


def _replicated_states(plan: Plan, P: int, copies16: int, states_full: int, largest: int) -> ModelStates:
    """Parameters and gradients in the weights' dtype on every device (plus DDP's bucket copy), the whole
    optimizer state; the end of backward adds two embedding-sized temporaries (the embedding's dense gradient
    and its accumulation into the tied weight's gradient)."""
    width = WeightsDtype.of(plan.weights_dtype).bytes
    step_temp = Optimizer.of(plan.optimizer).step_temporary_bytes(plan.device, P, largest) * width // 4
    return ModelStates(weights=width * P, copies16=copies16, grads=width * P,
                   buckets=width * P if Parallelism.of(plan.parallelism).replicated else 0,  # DP / DDP gradient buckets
                   optimizer=states_full, step_temp=max(step_temp, 2 * width * largest))


def _adapter_states(model: ModelProfile, plan: Plan, split: int, stage: int, n: int) -> ModelStates:
    """LoRA / QLoRA: frozen base weights (QLoRA: the blocks' linear weights in 4-bit NF4, the rest in the weights'
    dtype), and fp32 adapters with their gradients and optimizer states (PEFT keeps adapters in fp32 over a 16-bit
    base: ``autocast_adapter_dtype=True``, https://huggingface.co/docs/peft/package_reference/peft_model).

    Frozen weights get no gradients and no optimizer states; ZeRO-3 / FULL_SHARD shards them (FSDP + QLoRA,
    https://www.answer.ai/posts/2024-03-06-fsdp-qlora.html), stages 1-2 shard only the adapters' states
    (and gradients). Autocast still makes 16-bit copies of fp32 frozen weights; a 4-bit layer is dequantized to
    the compute dtype one matrix at a time (twice: forward and backward). Parameter offload at stage 3 (FSDP's
    ``CPUOffload(offload_params=True)``, what Answer.AI's fsdp_qlora runs for a 70B on two 24 GB GPUs) keeps every
    shard, the adapters' gradients and their optimizer step in CPU RAM (:func:`host_bytes`): the GPU holds the
    gathered units only."""
    method = Method.of(plan.method)
    width = WeightsDtype.of(plan.weights_dtype).bytes
    quantized = quantized_parameters(model) // split if method.spec.quantized_base else 0
    base = frozen_base_bytes(model, method.spec.quantized_base, width, plan.double_quant) // split
    mixed = plan.precision != Precision.FP32
    autocast = plan.weights_dtype == WeightsDtype.FP32 and mixed
    copies16 = 2 * (model.matmul_parameters // split - quantized) if autocast else 0
    if method.spec.quantized_base:
        copies16 += 2 * 2 * largest_block_matrix(model) // max(plan.tensor_parallel, 1)
    A = adapter_parameters(model, plan.lora_rank, plan.lora_targets) // split
    optimizer = Optimizer.of(plan.optimizer)
    per_param = optimizer.spec.state_bytes_per_param
    states = int((per_param if per_param is not None else 4) * A)  # Adafactor: at most a full fp32 moment
    grads = 4 * A // (n if stage >= 2 else 1)
    base_shard = base // n if stage >= 3 else 0
    if stage >= 3 and Parallelism.of(plan.parallelism).fsdp:
        root = root_parameters(model) * width // split  # the embedding and head stay in the weights' dtype
        base = base_shard + fsdp_gathered_bytes(model, root, base - root)
    elif stage >= 3:  # ZeRO-3 gathers about two of the largest tensors, as under full fine-tuning
        base = base_shard + 2 * width * model.largest_parameter_elements // max(plan.tensor_parallel, 1)
    step_temp = optimizer.step_temporary_bytes(plan.device, A, adapter_matrix_elements(
        model, plan.lora_rank, plan.lora_targets))
    if stage >= 3 and Offload.of(plan.offload).parameters:
        gathered = base - base_shard
        return ModelStates(weights=gathered + 4 * A // n, copies16=copies16 + (2 * A if mixed else 0), grads=0,
                           buckets=0, optimizer=0, step_temp=0)
    return ModelStates(weights=base + 4 * A, copies16=copies16 + (2 * A if mixed else 0), grads=grads,
                   buckets=4 * A if Parallelism.of(plan.parallelism).replicated else 0,
                   optimizer=states // (n if stage >= 1 else 1), step_temp=step_temp)


def _no_sync_gradients(states: ModelStates, model: ModelProfile, plan: Plan, split: int) -> ModelStates:
    """FSDP accumulating without synchronisation, as LitGPT's loops do: ``fabric.no_backward_sync(model,
    enabled=is_accumulating)`` around every micro-batch but the last (``litgpt/finetune/lora.py``, ``full.py``) runs
    FSDP's ``no_sync()``, under which "FSDP will accumulate the full model gradients (instead of gradient shards)
    until the eventual sync" (PyTorch FSDP API, ``FullyShardedDataParallel.no_sync``,
    https://pytorch.org/docs/stable/fsdp.html). Lightning Fabric's ``FSDPStrategy`` sets ``use_orig_params=True``
    and LitGPT wraps whole ``Block`` s, so under LoRA each block's flat parameter mixes frozen weights and adapters,
    and its gradient covers all of them (the same page's notes: mixing frozen and non-frozen parameters in one
    instance gives "higher than expected gradient memory usage"); the root unit (embedding, final norm, LM head)
    is all frozen and gets none. So each device holds an unsharded gradient, in the weights' dtype, of every
    parameter (full fine-tuning) or of every block parameter (LoRA) until the last micro-batch's reduce-scatter.

    Applies to LitGPT plans under FSDP with more than one micro-batch per step. LitGPT's ``FSDPStrategy`` scripts
    are what advisor prices (``full.py`` still; ``lora.py`` until 0.5.10: 0.5.11 moved LoRA to FSDP2's per-parameter
    sharding, where frozen weights get no gradient). A quantized base cannot run under LitGPT's FSDP. The Trainer's
    FSDP plans run with ``sync_each_batch`` (what ``--emit`` writes) and keep sharded gradients."""
    parallelism = Parallelism.of(plan.parallelism)
    method = Method.of(plan.method)
    if (plan.framework != Framework.LITGPT or not parallelism.fsdp or plan.gradient_accumulation_steps <= 1
            or method.spec.quantized_base):
        return states
    P = model.num_parameters // split
    if method.spec.adapters:  # the root unit's embedding and (untied) head are frozen: no gradient
        head = 0 if model.tied_embeddings else head_matmul_parameters(model)
        P = max(P - (model.vocab_size * model.hidden_size + head) // split, 0)
    return replace(states, grads=max(states.grads, WeightsDtype.of(plan.weights_dtype).bytes * P))


#: Plan fields the model states do not read, which the planner varies within a layout: a memo key leaves them out
#: (accumulation only matters as more than one micro-batch, :func:`_no_sync_gradients`).
_NOT_STATES = NOT_STATES  #: the table's rows that the model states do not read
_STATES_FIELDS = itemgetter(*(f for f in Plan.model_fields if f not in _NOT_STATES))  #: the memo key's
_MEMO: dict[tuple, tuple[ModelProfile, ModelStates]] = {}
_MEMO_ENTRIES = 4096


def model_states(model: ModelProfile, plan: Plan, nodes: int) -> ModelStates:
    """:func:`_model_states_of`, remembered: a search prices thousands of plans whose states repeat (each entry keeps
    its model alive, so the model's ``id`` in the key cannot be reused by another object)."""
    key = (id(model), nodes, plan.gradient_accumulation_steps > 1, _STATES_FIELDS(plan.__dict__))
    hit = _MEMO.get(key)
    if hit is not None and hit[0] is model:
        return hit[1]
    result = _model_states_of(model, plan, nodes)
    if len(_MEMO) >= _MEMO_ENTRIES:
        _MEMO.clear()
    _MEMO[key] = (model, result)
    return result


def _model_states_of(model: ModelProfile, plan: Plan, nodes: int) -> ModelStates:
    """Model-state bytes per device, with model parallelism's split (Narayanan et al. 2021,
    https://arxiv.org/abs/2104.04473 sec. 2: each GPU holds 1/(t·p) of the parameters, gradients and
    optimizer states; tensor parallel splits each matrix, the vocabulary-parallel head and embedding too)."""
    parallelism = Parallelism.of(plan.parallelism)
    split = max(plan.tensor_parallel, 1) * max(plan.pipeline_parallel, 1)
    n = plan.shard_group_size  # context-parallel ranks shard with the replicas (FSDP over dp x cp)
    if parallelism.spec.replicated_across_nodes:
        n = max(n // max(nodes, 1), 1)  # sharded inside a node, replicated across nodes
    if Method.of(plan.method).spec.adapters:
        return _no_sync_gradients(_adapter_states(model, plan, split, parallelism.stage, n), model, plan, split)
    weights = WeightsDtype.of(plan.weights_dtype)
    P = model.num_parameters // split
    local = local_parameters(model, plan)
    autocast = (plan.precision != Precision.FP32) and weights == WeightsDtype.FP32
    copies16 = (2 * model.matmul_parameters // split - 2 * (P - local)) if autocast else 0
    states_full = _optimizer_state_bytes(model, Optimizer.of(plan.optimizer), weights) // split
    largest = model.largest_parameter_elements // max(plan.tensor_parallel, 1)
    if local < P:  # the fused expert tensors split too; the embedding may then be the largest
        largest = max(largest // plan.expert_parallel_size, model.vocab_size * model.hidden_size // split)
    if _megatron_buffers(plan, weights, parallelism):
        states = _megatron_states(plan, n if parallelism.stage else 1, P, local, largest,
                                  _optimizer_state_bytes(model, Optimizer.of(plan.optimizer), WeightsDtype.FP32) // split)
    elif parallelism.stage:
        states = _sharded_states(plan, parallelism.stage, n, P, states_full, largest, zero_bucket_elements(model),
                                 local, model, root_parameters(model) // split)
    else:
        states = _replicated_states(plan, local, copies16, states_full * local // max(P, 1), largest)
    if plan.optimizer_in_backward:
        return _optimizer_in_backward(states, plan, model, P, largest)
    return _no_sync_gradients(states, model, plan, split)


#: CPU RAM DeepSpeed's ZeRO-Offload needs per parameter it offloads: fp32 master weights, Adam's two moments
#: and fp32 gradients (16 B), with parameters offloaded their 16-bit copy too (18 B), times its
#: ``additional_buffer_factor`` 1.5 (DeepSpeed's estimators, "Memory Requirements",
#: https://deepspeed.readthedocs.io/en/latest/memory.html: ``estimate_zero2/3_model_states_mem_needs``).
HOST_BUFFER_FACTOR = 1.5
HOST_SAFETY_MARGIN = 0.25  #: of the host's RAM kept for the OS, the data pipeline and the training process itself
#: CPU RAM ZeRO-Infinity keeps as staging buffers when the states and parameters live on NVMe: DeepSpeed's
#: defaults, 5 parameter buffers of 1e8 elements and 4 optimizer buffers (``offload_param.buffer_count``,
#: ``buffer_size``, https://www.deepspeed.ai/docs/config-json/#parameter-offloading), about 2 GiB.
NVME_STAGING_BYTES = 2 * 1024**3


def adapter_rank_sizes(model: ModelProfile, plan: Plan) -> tuple[float, float]:
    """LoRA / QLoRA on one model-parallel rank, before any data-parallel sharding: the frozen base's stored bytes
    (:func:`probes.adapters.frozen_base_bytes`: NF4 blocks under QLoRA, the rest in the weights' dtype) and the
    adapters' parameter count (:func:`probes.adapters.adapter_parameters`)."""
    method, split = Method.of(plan.method), plan.model_parallel_size
    base = frozen_base_bytes(model, method.spec.quantized_base, WeightsDtype.of(plan.weights_dtype).bytes,
                             plan.double_quant)
    return base / split, adapter_parameters(model, plan.lora_rank, plan.lora_targets) / split


def host_bytes(model: ModelProfile, plan: Plan, nodes: int = 1) -> int:
    """CPU RAM one node holds for the plan's offload, bytes (0 without offload).

    Each GPU offloads its shard (1/n of the states); a node holds its GPUs' shards. Offloaded states take
    4 (master) + 4 (gradient) + the optimizer's bytes per parameter, parameters 2 more; NVMe offload keeps
    only staging buffers in RAM. Under LoRA / QLoRA (parameter offload only, :func:`_adapter_states`) the frozen
    base's shard in its stored bytes, and the fp32 adapters with their gradients and optimizer states."""
    offload = Offload.of(plan.offload)
    if not offload.optimizer:
        return 0
    if offload.nvme:
        return NVME_STAGING_BYTES
    weights = WeightsDtype.of(plan.weights_dtype)
    per_gpu_share = max(plan.num_gpus, 1) // max(nodes, 1) / max(plan.data_parallel_size, 1)
    method = Method.of(plan.method)
    if method.spec.adapters:  # the frozen base's shards, the fp32 adapters, their gradients and optimizer states
        base, A = adapter_rank_sizes(model, plan)
        states = (Optimizer.of(plan.optimizer).spec.state_bytes_per_param or 4) * A
        return int((base + 8 * A + states) * per_gpu_share * HOST_BUFFER_FACTOR)
    P = model.num_parameters / plan.model_parallel_size
    states = _optimizer_state_bytes(model, Optimizer.of(plan.optimizer), weights) / plan.model_parallel_size
    per_param = 8 + (2 if offload.parameters else 0)
    return int((per_param * P + states) * per_gpu_share * HOST_BUFFER_FACTOR)


def host_usable_bytes(capacity_bytes: int | None) -> int | None:
    """A node's RAM less :data:`HOST_SAFETY_MARGIN`, bytes (None for an unknown RAM)."""
    return None if capacity_bytes is None else int(capacity_bytes * (1 - HOST_SAFETY_MARGIN))


def host_fits(offloaded_bytes: int, capacity_bytes: int | None) -> bool:
    """Whether ``offloaded_bytes`` (:func:`host_bytes` and offloaded activations) fit a node of ``capacity_bytes``
    RAM (:func:`host_usable_bytes`); true without offload (0) or with the RAM unknown (None)."""
    usable = host_usable_bytes(capacity_bytes)
    return offloaded_bytes == 0 or usable is None or offloaded_bytes <= usable
