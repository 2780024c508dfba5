"""The analytic memory model: bytes by component for one training step of a plan, per device.

Components follow the HF guide's anatomy of model memory
(https://huggingface.co/docs/transformers/v4.18.0/en/performance#anatomy-of-models-memory):

- weights: 4 B/param in fp32; mixed precision adds the 16-bit copies autocast makes of every matmul weight (saved
  for backward), the guide's "6 bytes per parameter";
- gradients: 4 B/param (the parameters stay fp32 under autocast);
- optimizer states: AdamW 8 B/param, 8-bit Adam 2, SGD with momentum 4, Adafactor the factored row + column
  statistics of every matrix (Shazeer & Stern 2018, sec. 3);
- activations: for the catalog families and task heads, coefficients fitted to simulated training steps
  (``advisor/data/activations.json``, made by ``benchmarks/calibrate_activations.py``): per layer
  c_h·s·b·h + c_f·s·b·ffn + c_s·b·heads·s² bytes, the head (fp32 logits and log-softmax) and
  what the start of backward adds (the loss gradient) or, under checkpointing, the backward of the last
  recomputed block (where the head is small: a classifier, a fused loss), one set per class of step
  (:func:`calibration_keys`: the residual stream's dtype, frozen layers); tensor parallelism with sequence
  parallelism divides them by t.
  Other architectures use the structural formula of :func:`layer_activation_bytes`, after Korthikanti et al.
  2022 sec. 4.1 (https://arxiv.org/abs/2205.05198), per class too: the residual stream in fp32 under autocast
  over fp32 weights and 16-bit over 16-bit weights (:func:`residual_bytes`), frozen layers without their inputs,
  a checkpointed block recomputed apart from the logits (within 10 % of the calibrated gated families' 16-bit,
  ZeRO / FSDP and LoRA columns, ``tests/engine/test_activation_classes.py``; it under-counts autocast over fp32 weights
  by 8-21 % and GPT-2's Python GELU by a third);
- checkpointing keeps each checkpointed block's input, and under a selective policy what it saves
  (:mod:`advisor.engine.checkpointing`); activation offloading (TRL's ``OffloadActivations``, torchtune's) moves
  what the blocks save to pinned CPU RAM and keeps one block's worth on the GPU (:data:`OFFLOAD_RESIDENT`);
- lifetimes that set the peak: autocast's cache keeps the 16-bit weight copies through the forward; in backward only
  those autograd saved remain (under checkpointing, the head's); the end of backward holds every gradient plus two
  embedding-sized temporaries; then the optimizer step's temporaries;
- CUDA context, and the caching allocator's reserve for ``device_bytes``.

ZeRO stages partition model states as the ZeRO paper's sec. 5 (https://arxiv.org/abs/1910.02054): 16-bit parameters
and gradients (2 + 2 B/param) plus K = 4 + states B/param of fp32 master weights and optimizer states, divided by
N_d from stage 1 (states), 2 (+ gradients), 3 (+ params).

Known limitations:
- the caching allocator's reserve (:mod:`advisor.engine.allocator`) is fitted to one GPU's published table and,
  for large transients, to eight trials on one H100; the CUDA context is 500 MiB (CUDA 12 with lazy loading) unless
  ``--cuda-context`` says otherwise, where that H100 (CUDA 13.0, torch 2.11) measured 744-760 MiB
  (:data:`probes.cuda_stack.LAZY_CONTEXT_BYTES`);
- fp16 and bf16 are assumed to hold the same bytes (GradScaler's buffers are not modelled);
- DDP's gradient buckets are counted as a second copy of the gradients (gradient_as_bucket_view=False).
"""

from __future__ import annotations

from operator import itemgetter

from pydantic import BaseModel, ConfigDict, Field

from probes.model import ModelProfile
from advisor.engine.states import host_bytes, host_fits, host_usable_bytes, model_states
from advisor.engine.calibration import _calibration, calibration_keys
from advisor.engine.checkpointing import checkpointed_blocks, selective_kept_bytes
from advisor.engine.structural import (compute_bytes, fused_layer_savings, fused_loss_head_bytes,
                                       layer_activation_bytes, norm_bytes, recomputed_block_bytes, residual_bytes)
from probes.cuda_stack import LAZY_CONTEXT_BYTES
from advisor.engine.allocator import device_bytes
from advisor.engine.experts import merged_expert_bytes
from advisor.engine.bands import Verdict
from advisor.engine.paged import paged_state_bytes, paged_verdict
from advisor.core.kernels import Attention, Checkpointing, LossKernel, LossKernelSpec, loss_kept
from advisor.core.vocabulary import PARALLELISM_SPECS, Device, Family, Precision, Task
from advisor.core.dimensions import NOT_ACTIVATIONS, Setting
from advisor.core.plan import Plan

#: Blocks' saved tensors an activation-offloading plan keeps on the GPU: one block's. TRL's ``OffloadActivations``
#: (``trl/models/activation_offloading.py``, torchtune's design) keeps the 5 latest offloaded tensors alive until
#: their copy ends (``max_fwd_stash_size``): at the forward's end the final norm's and the loss's, with the last
#: block's input under checkpointing; the backward brings back one autograd node's tensors at a time and frees the
#: previous node's. The output head is not offloaded (``NoOpManager`` on ``lm_head``); a checkpointed block's
#: recomputation runs outside the hooks, as without offloading. Read from the code, not yet measured by this project.
OFFLOAD_RESIDENT = 1


class MemoryComponents(BaseModel):
    """Bytes by kind, per device."""

    weights_bytes: int = Field(description="parameters: fp32 masters, plus 16-bit copies under mixed precision")
    gradients_bytes: int = Field(description="parameter gradients (and DDP's bucket copy)")
    optimizer_states_bytes: int = Field(description="optimizer state (ZeRO: this device's shard; paged_bytes of it paged)")
    activations_bytes: int = Field(description="activations saved for backward, logits and loss included")
    temporary_bytes: int = Field(description="transient buffers: loss gradient, optimizer-step temporaries")
    cuda_context_bytes: int = Field(description="CUDA context and library workspaces (0 on the CPU)")


class MemoryEstimate(BaseModel):
    """Memory of one training step, per device."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    peak_bytes: int = Field(description="most bytes held by live tensors during a step (torch.cuda.max_memory_allocated)")
    device_bytes: int = Field(description="what the device shows in use at that moment (NVML used): allocator reserve + "
                                          "context + paged_bytes")
    capacity_bytes: int = Field(description="device memory (RAM on the CPU), bytes")
    usable_bytes: int = Field(description="capacity less the safety margin: plans must keep device_bytes below it")
    fits: bool = Field(description="device_bytes <= usable_bytes, and host_bytes within the host's usable RAM")
    fits_capacity: bool = Field(False, description="device_bytes less paged_bytes <= capacity_bytes, and host_bytes "
                                                   "within the host's usable RAM: the step should run, but without "
                                                   "the safety margin "
                                                   "when fits is false (a tight plan)")
    host_bytes: int = Field(0, description="CPU RAM one node holds for offloaded states, parameters and "
                                           "activations, bytes (0 without offload)")
    activations_offloaded_bytes: int = Field(0, description="saved activations one micro-batch moves to pinned CPU "
                                                            "RAM per device under activation offloading, bytes")
    host_capacity_bytes: int | None = Field(None, description="the node's RAM the offload is checked against, "
                                                              "bytes (None: not checked)")
    components: MemoryComponents
    """the peak's parts, bytes each"""
    verdict: Verdict = Verdict.NO_FIT
    """fits (within the usable bytes) / tight (past the margin, within the tight limit of the capacity: validate it
    first) / does not fit; host_bytes within the host's usable RAM for the first two"""
    paged_bytes: int = 0
    """of the optimizer states, bytes per device in CUDA unified memory (bitsandbytes' paged optimizers,
    :mod:`advisor.engine.paged`): not in peak_bytes; counted as resident in device_bytes, evicted to CPU RAM
    when the device lacks the room (then tight: it runs, slower)"""
    band: float | None = None
    """the uncertainty of peak_bytes and device_bytes, relative (0.03: ± 3 %): the published runs of the plan's
    class (method, sharding, GPU generation) scored leave-one-source-out; None on the CPU"""

    @property
    def device_verdict(self) -> Verdict:
        """:class:`Verdict` of the device alone (:func:`verdict_of`), whatever the host's RAM says."""
        return paged_verdict(self.device_bytes, self.paged_bytes, self.usable_bytes, self.capacity_bytes)

    @property
    def host_usable_bytes(self) -> int | None:
        """The host RAM an offload may take, bytes: the node's RAM less
        :data:`advisor.engine.states.HOST_SAFETY_MARGIN` (None: the RAM is unknown, the offload unchecked)."""
        return host_usable_bytes(self.host_capacity_bytes)

    @property
    def host_verdict(self) -> Verdict:
        """:class:`Verdict` of the offload against the host's usable RAM (fits without offload or unknown RAM)."""
        return Verdict.FITS if host_fits(self.host_bytes, self.host_capacity_bytes) else Verdict.NO_FIT


def _loss(plan: Plan) -> LossKernelSpec:
    """What the plan's loss keeps as it runs (:func:`advisor.core.kernels.loss_kept`)."""
    return loss_kept(plan.loss_kernel, plan.torch_compile, plan.framework)


def _logit_scale(plan: Plan) -> float:
    """The share of the standard loss's logit bytes the plan's loss keeps as it runs (:func:`loss_kept`: its
    kernel's :class:`LossKernelSpec`, or chunked cross-entropy's when torch.compile compiles the standard loss)."""
    spec, standard = _loss(plan), LossKernel.STANDARD.spec
    if plan.precision == Precision.FP32:
        return spec.logit_bytes_fp32 / standard.logit_bytes_fp32
    return spec.logit_bytes / standard.logit_bytes


def pipeline_in_flight(plan: Plan) -> float:
    """Micro-batches of the whole model's activations the first pipeline stage holds at its peak, over 1F1B's one.

    1F1B: p micro-batches of its L/p layers, one micro-batch's worth (Narayanan et al. 2021,
    https://arxiv.org/abs/2104.04473 sec. 2.2.1). The interleaved schedule with v chunks a stage runs 2(p − 1) +
    (v − 1)·p chunk forwards of L/(p·v) layers each before the first stage's first backward, plus the one in flight
    (Megatron-Core ``pipeline_parallel/schedules.py``, ``forward_backward_pipelining_with_interleaving``: its
    ``num_warmup_microbatches``): 1 + (p − 1)/(p·v) micro-batches' worth, the factor of Korthikanti et al. 2022
    (https://arxiv.org/abs/2205.05198 sec. 4.2.3)."""
    pp, v = max(plan.pipeline_parallel, 1), max(plan.virtual_pipeline, 1)
    return 1.0 if pp == 1 or v == 1 else 1 + (pp - 1) / (pp * v)


def _selective_kept(model: ModelProfile, plan: Plan, seq_len: int) -> int:
    """What op-level selective checkpointing keeps in each block beyond its input (0 under other policies)."""
    if Checkpointing.of(plan.checkpointing) is not Checkpointing.SELECTIVE_OP:
        return 0
    return selective_kept_bytes(model, plan, seq_len, compute_bytes(plan))


def _calibrated_activation_bytes(model: ModelProfile, plan: Plan, seq_len: int, c: dict,
                                 eager: bool) -> tuple[int, int]:
    b, s, h = plan.micro_batch_size, seq_len, model.hidden_size
    sbh, sbf, sbv = s * b * h, s * b * model.ffn_size, s * b * model.vocab_size
    nss = model.num_attention_heads * s * s
    # the fit counts a T5 encoder + decoder layer pair as one layer
    layers = model.num_layers / 2 if model.family == Family.ENCODER_DECODER else model.num_layers
    full_layer = c["layer_h"] * sbh + c["layer_f"] * sbf + c["layer_s"] * b * nss
    full_layer -= fused_layer_savings(model, plan, seq_len, c["layer_f"])
    loss = _loss(plan)
    logits = _logit_scale(plan) * c["head_v"] * sbv if c["head_v"] > 1 else c["head_v"] * sbv
    grad_v = (lambda coefficient: coefficient * sbv if loss.grad_logits or coefficient < 1 else 0.0)
    start_of_backward = grad_v(c["backward_v"]) + c["backward_h"] * sbh
    if eager and c["layer_s"] < 1:
        # the calibration ran CUDA's flash attention; the eager path keeps the s x s
        # probabilities (fp32), their dropout mask and output, and autocast's 16-bit copy
        per_score = 4 + (7 if model.dropout else 0) + (2 if (plan.precision != Precision.FP32) else 0)
        full_layer += per_score * b * nss
    head = c["head_h"] * sbh + logits + c["head_s"] * nss
    transient = recomputed_block_bytes(c, sbh, sbf, full_layer, model.family == Family.ENCODER_DECODER)
    if plan.gradient_checkpointing:
        # every checkpointed block keeps its input (and what a selective policy saves); the forward peaks in one
        # block's recomputable internals or at the head's logits; the backward starts with the loss gradient
        kept = c["ckpt_layer_h"] * sbh + _selective_kept(model, plan, seq_len)
        checkpointed = checkpointed_blocks(plan, layers)
        blocks = checkpointed * kept + (layers - checkpointed) * full_layer
        if plan.activation_offloading:
            blocks = OFFLOAD_RESIDENT * (kept if checkpointed >= layers else full_layer)  # the rest in CPU RAM
        forward = blocks + max(transient, head)
        extra = grad_v(c["ckpt_backward_v"]) + c["ckpt_backward_h"] * sbh
        if "ckpt_block_h" in c:  # the backward's other peak: the last block recomputed beside its gradients, once
            # the head's logits are freed (it sets the peak where the head is small: a classifier, a fused loss)
            extra = max(extra, transient + c["ckpt_block_h"] * sbh + c["ckpt_block_f"] * sbf - max(transient, head))
    else:
        forward = (OFFLOAD_RESIDENT if plan.activation_offloading else layers) * full_layer + head
        extra = start_of_backward
    return int(max(forward, 0)), int(max(extra, 0))


#: Plan fields the activations do not depend on, which the planner varies within a layout: a memo key leaves them out.
_NOT_ACTIVATIONS = NOT_ACTIVATIONS  #: the table's rows that the activations do not read
#: the memo key's fields: the attention kernel enters it as ``eager`` (whether the kernel keeps the s x s scores), all
#: that the activations read of it, so FlashAttention-2, -3 and SDPA plans share their activations
_ACTIVATION_FIELDS = itemgetter(*(f for f in Plan.model_fields if f not in _NOT_ACTIVATIONS | {"attention"}))
_MEMO: dict[tuple, tuple[ModelProfile, tuple[int, int]]] = {}
_MEMO_ENTRIES = 8192


def _activation_bytes(model: ModelProfile, plan: Plan, seq_len: int, eager: bool) -> tuple[int, int]:
    """:func:`_activation_bytes_of`, remembered: a search prices thousands of plans whose activations repeat (each
    entry keeps its model alive, so the model's ``id`` in the key cannot be reused by another object)."""
    key = (id(model), seq_len, eager, _ACTIVATION_FIELDS(plan.__dict__))
    hit = _MEMO.get(key)
    if hit is not None and hit[0] is model:
        return hit[1]
    result = _activation_bytes_of(model, plan, seq_len, eager)
    if len(_MEMO) >= _MEMO_ENTRIES:
        _MEMO.clear()
    _MEMO[key] = (model, result)
    return result


def _activation_bytes_of(model: ModelProfile, plan: Plan, seq_len: int, eager: bool) -> tuple[int, int]:
    """(bytes held at the end of the forward pass, what the backward's peak adds to them), bytes.

    Families and task heads of the calibration table use coefficients fitted to simulated steps;
    others the structural formula of :func:`layer_activation_bytes` with fp32 logits and loss.
    """
    table = _calibration().get(model.model_type, {}).get(model.task, {})
    key = next((k for k in calibration_keys(plan) if k in table), None)
    if key is not None:
        return _calibrated_activation_bytes(model, plan, seq_len, table[key], eager)
    b, s, h = plan.micro_batch_size, seq_len, model.hidden_size
    a = compute_bytes(plan)
    mlp = (4 if model.gated_mlp else 2) * a
    enc = layer_activation_bytes(model, plan, s, eager_attention=eager) - fused_layer_savings(model, plan, s, mlp)
    dec = layer_activation_bytes(model, plan, s, cross_attention=model.family == Family.ENCODER_DECODER,
                                 eager_attention=eager) - fused_layer_savings(model, plan, s, mlp)
    per_layer = [enc] * model.encoder_layers + [dec] * model.decoder_layers
    if plan.gradient_checkpointing:
        # each checkpointed block keeps only its input (the residual stream) and what a selective policy saves;
        # one block is recomputed at a time
        checkpointed = int(checkpointed_blocks(plan, len(per_layer)))
        kept = residual_bytes(plan) * s * b * h + _selective_kept(model, plan, s)
        layers = kept * checkpointed + sum(per_layer[checkpointed:])
        recomputed = max(per_layer)  # in backward, once the logits' gradient is consumed: not beside the head
        if plan.activation_offloading:  # the rest in CPU RAM
            layers = OFFLOAD_RESIDENT * (kept if checkpointed >= len(per_layer) else max(per_layer))
    else:
        layers = OFFLOAD_RESIDENT * max(per_layer, default=0) if plan.activation_offloading else sum(per_layer)
        recomputed = 0
    r = residual_bytes(plan)  # the embedding's output and the residual stream, in the weights' dtype under bf16
    embeddings = r * s * b * h * (2 if model.family == Family.ENCODER_DECODER else 1) + (s * b * h if model.dropout else 0)
    final_norm = norm_bytes(model, plan)  # as the blocks' norms (layer_activation_bytes)
    if Task.of(model.task).language_modeling:
        v = model.vocab_size
        head_input = (a + final_norm) * s * b * h  # final norm's input (and fp32 copy) + LM-head input
        # the standard loss keeps 16-bit logits, their fp32 copy and log_softmax; chunked and fused kernels less
        logits = _logit_scale(plan) * (4 + 4 + (2 if (plan.precision != Precision.FP32) else 0)) * s * b * v
        loss_grad = a * s * b * v if _loss(plan).grad_logits else 0
    else:
        head_input = (a + final_norm) * b * h * s
        logits = 0
        loss_grad = 0
    return layers + embeddings + max(head_input + logits, recomputed), loss_grad


def offload_host_bytes(model: ModelProfile, plan: Plan, seq_len: int, nodes: int = 1,
                       offloaded: int | None = None) -> int:
    """Pinned CPU RAM one node holds for offloaded activations, bytes: each GPU's
    :func:`offloaded_activation_bytes`, each tensor rounded up to a power of two as PyTorch's caching host allocator
    allocates pinned blocks (``CachingHostAllocator``: ``PowerOf2Ceil``; priced at the block input's size, the tensor
    checkpointing offloads), times the node's GPUs (``offloaded``: the per-device bytes, when already worked out)."""
    offloaded = offloaded_activation_bytes(model, plan, seq_len) if offloaded is None else offloaded
    if not offloaded:
        return 0
    tensor = plan.micro_batch_size * seq_len * model.hidden_size * 2
    rounding = (1 << max(tensor - 1, 1).bit_length()) / tensor
    return int(offloaded * rounding * max(plan.num_gpus, 1) // max(nodes, 1))


def persistent_bytes(components: MemoryComponents) -> int:
    """Bytes of the model states (weights and their 16-bit copies, gradients, optimizer states): what the caching
    allocator holds at exact sizes (:data:`~advisor.engine.allocator.TRANSIENT_RESERVE`)."""
    return components.weights_bytes + components.gradients_bytes + components.optimizer_states_bytes


def activation_traffic_bytes(model: ModelProfile, plan: Plan, seq_len: int) -> int:
    """Bytes of activations one micro-batch's forward produces (what every layer writes and its backward reads back),
    checkpointed or not: the memory-bound work of a step scales with it, and fused kernels (compile, Liger) shrink
    it as they shrink what is saved (:func:`fused_layer_savings`)."""
    eager = Attention.of(plan.attention).spec.keeps_scores
    if plan.gradient_checkpointing or plan.activation_offloading:
        plan = plan.model_copy(update={Setting.GRADIENT_CHECKPOINTING: False, Setting.ACTIVATION_OFFLOADING: False})
    return _activation_bytes(model, plan, seq_len, eager)[0]


def offloaded_activation_bytes(model: ModelProfile, plan: Plan, seq_len: int) -> int:
    """Bytes of saved activations one micro-batch's forward moves to CPU RAM under activation offloading, per device
    (0 without it): what the blocks would keep on the GPU without it, less the one block's worth that stays
    (:data:`OFFLOAD_RESIDENT`). The copies cross PCIe once each way per micro-batch
    (:func:`advisor.engine.communication.activation_offload_seconds`)."""
    if not plan.activation_offloading:
        return 0
    eager = Attention.of(plan.attention).spec.keeps_scores
    return _offloaded(model, plan, seq_len, eager, _activation_bytes(model, plan, seq_len, eager)[0])


def _offloaded(model: ModelProfile, plan: Plan, seq_len: int, eager: bool, resident: int) -> int:
    """:func:`offloaded_activation_bytes` given the activations an offloading plan keeps (``resident``, before the
    tensor-parallel split)."""
    kept = _activation_bytes(model, plan.model_copy(update={Setting.ACTIVATION_OFFLOADING: False}), seq_len, eager)[0]
    return max(kept - resident, 0) // max(plan.tensor_parallel, 1)


def _per_device(model: ModelProfile, plan: Plan, seq_len: int, act: int, backward_extra: int) -> tuple[int, int]:
    """One device's (activations, backward's extra), bytes, from the whole micro-batch's: tensor parallel with sequence
    parallelism splits every activation of a layer over the t ranks, sbh·34/t (Korthikanti et al. 2022,
    https://arxiv.org/abs/2205.05198 sec. 4.2.2 and Table 2), and the vocabulary-parallel loss splits the logits
    (Megatron-LM's ``vocab_parallel_cross_entropy``, torchtitan's ``loss_parallel``); Megatron-Core / NeMo turn
    sequence parallelism on with TP and torchtitan's TP plan shards the norms' sequence. Under the 1F1B schedule the
    first pipeline stage keeps p micro-batches of its L/p layers in flight: one micro-batch's worth of the whole model
    (Narayanan sec. 2.2.1), an interleaved one more (:func:`pipeline_in_flight`). LoRA on the routed experts adds their
    merged weights (:func:`advisor.engine.experts.merged_expert_bytes`), Liger's fused loss the gradients it makes in
    the forward (:func:`advisor.engine.structural.fused_loss_head_bytes`)."""
    tp, merged = max(plan.tensor_parallel, 1), merged_expert_bytes(model, plan)
    return (int(act * pipeline_in_flight(plan)) // tp + merged[0],
            backward_extra // tp + merged[1] + fused_loss_head_bytes(model, plan, seq_len))


def estimate_memory(model: ModelProfile, plan: Plan, seq_len: int, capacity_bytes: int,
                    safety_margin: float = 0.10, *, attention: str | None = None,
                    cuda_context_bytes: int = LAZY_CONTEXT_BYTES, nodes: int = 1,
                    host_capacity_bytes: int | None = None) -> MemoryEstimate:
    """Estimate the memory of one training step of ``plan`` on one device.

    Args:
        model: the model profile (its task head included).
        plan: the candidate plan.
        seq_len: tokens per sample (context parallel c: each rank keeps its own s/c, ring attention streaming the
            others' keys and values through a block at a time: Liu et al. 2023, https://arxiv.org/abs/2310.01889).
        capacity_bytes: device memory (host RAM for a CPU plan), bytes.
        safety_margin: fraction of capacity kept free.
        attention: overrides ``plan.attention`` (deprecated: set the plan's field).
        cuda_context_bytes: the CUDA context and library workspaces (older CUDA versions: more).
        nodes: nodes of the plan (FSDP HYBRID_SHARD shards over one node's GPUs).
        host_capacity_bytes: one node's RAM, bytes: an offloading plan fits only if its :func:`host_bytes`
            stay within it less :data:`advisor.engine.states.HOST_SAFETY_MARGIN` (None: not checked).
    Returns:
        MemoryEstimate; ``fits`` compares ``device_bytes`` with ``capacity × (1 − margin)``, ``fits_capacity`` with
        the whole capacity; ``verdict``: :func:`verdict_of` (the planner keeps the margin).
    """
    eager, seq_len = Attention.of(attention or plan.attention).spec.keeps_scores, -(-seq_len // plan.context_parallel)
    act, backward_extra = _activation_bytes(model, plan, seq_len, eager)
    offloaded, tp = _offloaded(model, plan, seq_len, eager, act) if plan.activation_offloading else 0, max(plan.tensor_parallel, 1)
    act, backward_extra = _per_device(model, plan, seq_len, act, backward_extra)
    s = model_states(model, plan, nodes)
    paged = paged_state_bytes(model, plan, s.optimizer)  # in unified memory, outside the allocator's peak
    resident = s.weights + s.optimizer - paged
    grads_total = s.grads + s.buckets
    # autocast's weight casts live in its cache through the forward; in the backward only those
    # autograd saved remain: all of them, or under checkpointing only the (non-checkpointed) head's
    head_matmul = model.vocab_size * model.hidden_size // tp if Task.of(model.task).language_modeling else 0
    copies16_backward = min(s.copies16, 2 * head_matmul) if plan.gradient_checkpointing else s.copies16
    backward_phase = max(s.copies16 + act, copies16_backward + act + backward_extra)
    if plan.gradient_accumulation_steps > 1 or PARALLELISM_SPECS[plan.parallelism].stage:
        # the gradients of earlier micro-batches stay through the next forward and backward
        peak = resident + grads_total + max(backward_phase, s.step_temp)
    else:
        peak = resident + max(backward_phase + s.buckets, grads_total + s.step_temp)
    context = cuda_context_bytes if plan.device == Device.CUDA else 0
    components = MemoryComponents(
        weights_bytes=s.weights + s.copies16, gradients_bytes=grads_total, optimizer_states_bytes=s.optimizer,
        activations_bytes=act, temporary_bytes=max(backward_extra, s.step_temp), cuda_context_bytes=context)
    device = device_bytes(int(peak), plan, context, persistent_bytes(components) - paged) + paged
    usable = int(capacity_bytes * (1 - safety_margin))
    host = host_bytes(model, plan, nodes) + offload_host_bytes(model, plan, seq_len, nodes, offloaded)
    on_host = host_fits(host, host_capacity_bytes)
    return MemoryEstimate(peak_bytes=int(peak), device_bytes=device, capacity_bytes=capacity_bytes,
                          usable_bytes=usable, fits=device <= usable and on_host,
                          fits_capacity=device - paged <= capacity_bytes and on_host, components=components,
                          verdict=paged_verdict(device, paged, usable, capacity_bytes, on_host), paged_bytes=paged,
                          host_bytes=host, host_capacity_bytes=host_capacity_bytes,
                          activations_offloaded_bytes=offloaded)
