"""The analytic memory model: bytes by component for one training step of a plan, per device.

Components follow the HF guide's anatomy of model memory
(https://huggingface.co/docs/transformers/v4.18.0/en/performance#anatomy-of-models-memory):

- weights: 4 B/param in fp32; mixed precision adds the 16-bit copies autocast makes of every
  matmul weight (saved for backward), the guide's "6 bytes per parameter";
- gradients: 4 B/param (the parameters stay fp32 under autocast);
- optimizer states: AdamW 8 B/param, 8-bit Adam 2, SGD with momentum 4, Adafactor the factored
  row + column statistics of every matrix (Shazeer & Stern 2018, sec. 3);
- activations: for the catalog families and task heads, coefficients fitted to simulated training
  steps (``advisor/data/activations.json``, made by ``benchmarks/calibrate_activations.py``): per
  layer c_h·s·b·h + c_f·s·b·ffn + c_s·b·heads·s² bytes, the head (fp32 logits and log-softmax) and
  what the start of backward adds (the loss gradient). Other architectures use the structural
  formula of :func:`layer_activation_bytes`, after Korthikanti et al. 2022 sec. 4.1
  (https://arxiv.org/abs/2205.05198), with the residual stream in fp32 under autocast;
- lifetimes that set the peak: autocast's cache keeps the 16-bit weight copies through the
  forward; in backward only those autograd saved remain (under checkpointing, the head's); the
  end of backward holds every gradient plus two embedding-sized temporaries; then the optimizer
  step's temporaries;
- CUDA context, and the caching allocator's reserve for ``device_bytes``.

ZeRO stages partition model states as the ZeRO paper's sec. 5 (https://arxiv.org/abs/1910.02054):
16-bit parameters and gradients (2 + 2 B/param) plus K = 4 + states B/param of fp32 master
weights and optimizer states, divided by N_d from stage 1 (states), 2 (+ gradients), 3 (+ params).

Known limitations:
- the caching allocator's reserve is a flat 10 % over the peak and the CUDA context a flat 500 MiB
  (CUDA 12 with lazy loading); neither is yet measured on a GPU by this project;
- fp16 and bf16 are assumed to hold the same bytes (GradScaler's buffers are not modelled);
- DDP's gradient buckets are counted as a second copy of the gradients (gradient_as_bucket_view=False).
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field

from probes.model import ModelProfile
from probes.units import MIB
from advisor.engine.states import HOST_SAFETY_MARGIN, host_bytes, model_states
from probes.vocabulary import PARALLELISM_SPECS, Attention, Device, Family, Precision, Task
from rules.facts import Plan

CUDA_CONTEXT_BYTES = 500 * MIB  #: CUDA 12 with lazy module loading; the seeds measured 1343 MiB on CUDA 11.2
ALLOCATOR_OVERHEAD = 1.10  #: caching allocator reserve over the live-tensor peak


class MemoryComponents(BaseModel):
    """Bytes by kind, per device."""

    weights_bytes: int = Field(description="parameters: fp32 masters, plus 16-bit copies under mixed precision")
    gradients_bytes: int = Field(description="parameter gradients (and DDP's bucket copy)")
    optimizer_states_bytes: int = Field(description="optimizer state (ZeRO: this device's shard)")
    activations_bytes: int = Field(description="activations saved for backward, logits and loss included")
    temporary_bytes: int = Field(description="transient buffers: loss gradient, optimizer-step temporaries")
    cuda_context_bytes: int = Field(description="CUDA context and library workspaces (0 on the CPU)")


class MemoryEstimate(BaseModel):
    """Memory of one training step, per device."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    peak_bytes: int = Field(description="most bytes held by live tensors during a step (torch.cuda.max_memory_allocated)")
    device_bytes: int = Field(description="what the device shows in use at that moment (NVML used): allocator reserve + context")
    capacity_bytes: int = Field(description="device memory (RAM on the CPU), bytes")
    usable_bytes: int = Field(description="capacity less the safety margin: plans must keep device_bytes below it")
    fits: bool = Field(description="device_bytes <= usable_bytes, and host_bytes within the host's usable RAM")
    host_bytes: int = Field(0, description="CPU RAM one node holds for offloaded states and parameters, bytes "
                                           "(0 without offload)")
    host_capacity_bytes: int | None = Field(None, description="the node's RAM the offload is checked against, "
                                                              "bytes (None: not checked)")
    components: MemoryComponents
    """the peak's parts, bytes each"""


def _bytes_per_activation(plan: Plan) -> int:
    return Precision.of(plan.precision).activation_bytes


def layer_activation_bytes(model: ModelProfile, plan: Plan, seq_len: int, *, cross_attention: bool = False,
                           eager_attention: bool = False) -> int:
    """Bytes one transformer block saves for backward at micro-batch ``plan.micro_batch_size``.

    Residual stream and norm inputs are fp32 (autocast runs layer/RMS norms in fp32); matmul
    inputs, attention q/k/v/output and MLP intermediates are in the compute dtype; dropout
    masks are 1 byte per element. Eager attention adds the softmax output (fp32 under
    autocast), its dropout mask and the 16-bit copy the next matmul saves (s x s per head).
    """
    b, s, h = plan.micro_batch_size, seq_len, model.hidden_size
    a = _bytes_per_activation(plan)
    sbh = s * b * h
    sbf = s * b * model.ffn_size
    drop = 1 if model.dropout else 0
    norm = (8 if model.gated_mlp else 4) * sbh  # RMSNorm (Llama) keeps input and normalized copy in fp32
    qkv_width = (model.num_attention_heads + 2 * model.num_key_value_heads) * model.head_dim
    inner = model.num_attention_heads * model.head_dim

    def attention() -> int:
        total = norm + a * sbh + a * s * b * qkv_width + a * s * b * inner + drop * sbh
        if eager_attention:
            scores = model.num_attention_heads * s * s * b
            # softmax output is fp32 (autocast runs softmax in fp32); the AV matmul saves its own
            # copy when dropout or a cast to the compute dtype made a new tensor
            total += scores * (4 + drop + (a if drop or (plan.precision != Precision.FP32) else 0))
        return total

    total = attention()
    if cross_attention:
        total += attention()
    if model.gated_mlp:
        total += norm + a * sbh + 4 * a * sbf
    else:
        total += norm + a * sbh + 2 * a * sbf + drop * sbh
    return total


@lru_cache(maxsize=1)
def _calibration() -> dict:
    """Per-family activation coefficients fitted to simulated steps (benchmarks/calibrate_activations.py)."""
    text = resources.files("advisor").joinpath("data/activations.json").read_text(encoding="utf-8")
    return json.loads(text)


def _calibrated_activation_bytes(model: ModelProfile, plan: Plan, seq_len: int, c: dict,
                                 eager: bool) -> tuple[int, int]:
    b, s, h = plan.micro_batch_size, seq_len, model.hidden_size
    sbh, sbf, sbv = s * b * h, s * b * model.ffn_size, s * b * model.vocab_size
    nss = model.num_attention_heads * s * s
    # the fit counts a T5 encoder + decoder layer pair as one layer
    layers = model.num_layers / 2 if model.family == Family.ENCODER_DECODER else model.num_layers
    full_layer = c["layer_h"] * sbh + c["layer_f"] * sbf + c["layer_s"] * b * nss
    start_of_backward = c["backward_v"] * sbv + c["backward_h"] * sbh
    if eager and c["layer_s"] < 1:
        # the calibration ran CUDA's flash attention; the eager path keeps the s x s
        # probabilities (fp32), their dropout mask and output, and autocast's 16-bit copy
        per_score = 4 + (7 if model.dropout else 0) + (2 if (plan.precision != Precision.FP32) else 0)
        full_layer += per_score * b * nss
    head = c["head_h"] * sbh + c["head_v"] * sbv + c["head_s"] * nss
    transient = full_layer
    if model.family == Family.ENCODER_DECODER:
        # checkpointing runs one block at a time; the largest is a decoder block: its self- and
        # cross-attention (2 of the pair's 3 attention blocks) and about half of the other tensors
        transient = (0.55 * c["layer_h"] * sbh + 0.5 * c["layer_f"] * sbf
                     + (2 / 3) * (full_layer - c["layer_h"] * sbh - c["layer_f"] * sbf))
    if plan.gradient_checkpointing:
        # every block keeps its input; the forward peaks in one block's recomputable internals or
        # at the head's logits; the backward starts with the loss gradient
        forward = layers * c["ckpt_layer_h"] * sbh + max(transient, head)
        extra = c["ckpt_backward_v"] * sbv + c["ckpt_backward_h"] * sbh
    else:
        forward = layers * full_layer + head
        extra = start_of_backward
    return int(max(forward, 0)), int(max(extra, 0))


def _activation_bytes(model: ModelProfile, plan: Plan, seq_len: int, eager: bool) -> tuple[int, int]:
    """(bytes held at the end of the forward pass, what the start of backward adds), bytes.

    Families and task heads of the calibration table use coefficients fitted to simulated steps;
    others the structural formula of :func:`layer_activation_bytes` with fp32 logits and loss.
    """
    table = _calibration().get(model.model_type, {}).get(model.task)
    if table is not None:
        coefficients = table["fp32" if plan.precision == Precision.FP32 else "mixed"]
        return _calibrated_activation_bytes(model, plan, seq_len, coefficients, eager)
    b, s, h = plan.micro_batch_size, seq_len, model.hidden_size
    a = _bytes_per_activation(plan)
    enc = layer_activation_bytes(model, plan, s, eager_attention=eager)
    dec = layer_activation_bytes(model, plan, s, cross_attention=model.family == Family.ENCODER_DECODER,
                                 eager_attention=eager)
    per_layer = [enc] * model.encoder_layers + [dec] * model.decoder_layers
    if plan.gradient_checkpointing:
        # each block keeps only its input (fp32 residual stream); one block is recomputed at a time
        layers = 4 * s * b * h * len(per_layer) + max(per_layer)
    else:
        layers = sum(per_layer)
    embeddings = 4 * s * b * h * (2 if model.family == Family.ENCODER_DECODER else 1) + (s * b * h if model.dropout else 0)
    if Task.of(model.task).language_modeling:
        v = model.vocab_size
        head_input = (a + 4) * s * b * h  # final norm input (fp32) + LM-head input
        logits = (4 + 4 + (2 if (plan.precision != Precision.FP32) else 0)) * s * b * v  # 16-bit logits, fp32 copy, log_softmax
        loss_grad = a * s * b * v
    else:
        head_input = (a + 4) * b * h * s
        logits = 0
        loss_grad = 0
    return layers + embeddings + head_input + logits, loss_grad


def device_bytes(peak_bytes: int, plan: Plan, context_bytes: int = CUDA_CONTEXT_BYTES) -> int:
    """What the device shows in use for a live-tensor peak: the caching allocator's reserve plus
    the CUDA context (on the CPU, the peak itself)."""
    if plan.device != Device.CUDA:
        return peak_bytes
    return int(peak_bytes * ALLOCATOR_OVERHEAD) + context_bytes


def estimate_memory(model: ModelProfile, plan: Plan, seq_len: int, capacity_bytes: int,
                    safety_margin: float = 0.10, *, attention: str | None = None,
                    cuda_context_bytes: int = CUDA_CONTEXT_BYTES, nodes: int = 1,
                    host_capacity_bytes: int | None = None) -> MemoryEstimate:
    """Estimate the memory of one training step of ``plan`` on one device.

    Args:
        model: the model profile (its task head included).
        plan: the candidate plan.
        seq_len: tokens per sample.
        capacity_bytes: device memory (host RAM for a CPU plan), bytes.
        safety_margin: fraction of capacity kept free.
        attention: 'sdpa' (flash / memory-efficient, CUDA's default) or 'eager'; default: sdpa on
            CUDA, eager on the CPU (:meth:`probes.vocabulary.Attention.default`).
        cuda_context_bytes: the CUDA context and library workspaces (older CUDA versions: more).
        nodes: nodes of the plan (FSDP HYBRID_SHARD shards over one node's GPUs).
        host_capacity_bytes: one node's RAM, bytes: an offloading plan fits only if its :func:`host_bytes`
            stay within it less :data:`HOST_SAFETY_MARGIN` (None: not checked).
    Returns:
        MemoryEstimate; ``fits`` compares ``device_bytes`` with ``capacity × (1 − margin)``.
    """
    eager = (attention or Attention.default(plan.device)) == Attention.EAGER
    act, backward_extra = _activation_bytes(model, plan, seq_len, eager)
    tp = max(plan.tensor_parallel, 1)
    if tp * max(plan.pipeline_parallel, 1) > 1:
        # tensor parallel splits the activations inside a layer to sbh(10 + 24/t) of sbh·34 (Korthikanti
        # et al. 2022, https://arxiv.org/abs/2205.05198 sec. 4.1, without sequence parallelism); under the
        # 1F1B schedule the first stage keeps p micro-batches of its L/p layers in flight: one
        # micro-batch's worth of the whole model (Narayanan sec. 2.2.1)
        act = int(act * (10 + 24 / tp) / 34)
        backward_extra //= tp
    s = model_states(model, plan, nodes)
    grads_total = s.grads + s.buckets
    # autocast's weight casts live in its cache through the forward; in the backward only those
    # autograd saved remain: all of them, or under checkpointing only the (non-checkpointed) head's
    head_matmul = model.vocab_size * model.hidden_size // tp if Task.of(model.task).language_modeling else 0
    copies16_backward = min(s.copies16, 2 * head_matmul) if plan.gradient_checkpointing else s.copies16
    backward_phase = max(s.copies16 + act, copies16_backward + act + backward_extra)
    if plan.gradient_accumulation_steps > 1 or PARALLELISM_SPECS[plan.parallelism].stage:
        # the gradients of earlier micro-batches stay through the next forward and backward
        peak = s.weights + s.optimizer + grads_total + max(backward_phase, s.step_temp)
    else:
        peak = s.weights + s.optimizer + max(backward_phase + s.buckets, grads_total + s.step_temp)
    context = cuda_context_bytes if plan.device == Device.CUDA else 0
    device = device_bytes(int(peak), plan, context)
    usable = int(capacity_bytes * (1 - safety_margin))
    host = host_bytes(model, plan, nodes)
    host_fits = host == 0 or host_capacity_bytes is None or host <= host_capacity_bytes * (1 - HOST_SAFETY_MARGIN)
    components = MemoryComponents(
        weights_bytes=s.weights + s.copies16, gradients_bytes=grads_total, optimizer_states_bytes=s.optimizer,
        activations_bytes=act, temporary_bytes=max(backward_extra, s.step_temp), cuda_context_bytes=context)
    return MemoryEstimate(peak_bytes=int(peak), device_bytes=device, capacity_bytes=capacity_bytes,
                          usable_bytes=usable, fits=device <= usable and host_fits, components=components,
                          host_bytes=host, host_capacity_bytes=host_capacity_bytes)
