"""The structural activation formula: what one transformer block saves for backward, tensor by tensor, for
families without calibrated coefficients and for Megatron-style fused layers (Korthikanti et al. 2022 sec. 4.1,
https://arxiv.org/abs/2205.05198), per class of step, and what fused kernels (torch.compile, Liger-Kernel) do not
keep, for every family.
:mod:`advisor.engine.memory` assembles the step's peak from them."""

from __future__ import annotations

from advisor.core.kernels import PYTHON_GELU_MODEL_TYPES, Framework, LossKernel
from probes.model import ModelProfile
from advisor.core.vocabulary import LoraTargets, Method, Parallelism, Precision, WeightsDtype
from advisor.core.plan import Plan


def compute_bytes(plan: Plan) -> int:
    """Bytes per element of what a matmul computes in: 4 in fp32, 2 under fp16 / bf16."""
    return Precision.of(plan.precision).activation_bytes


def sixteen_bit_weights(plan: Plan) -> bool:
    """Whether the step computes with 16-bit parameters: bf16 weights, or ZeRO / FSDP's 16-bit working copy
    (:func:`advisor.engine.calibration.calibration_keys`)."""
    return plan.weights_dtype != WeightsDtype.FP32 or Parallelism.of(plan.parallelism).stage > 0


def residual_bytes(plan: Plan) -> int:
    """Bytes per element of the residual stream and of what a norm receives: fp32 under autocast over fp32 weights
    (autocast runs layer / RMS norms in fp32 and the fp32 residual adds keep fp32), the compute dtype over 16-bit
    weights ("pure bf16": the residual stream stays 16-bit), 4 in fp32."""
    if plan.precision == Precision.FP32 or not sixteen_bit_weights(plan):
        return 4
    return compute_bytes(plan)


def norm_bytes(model: ModelProfile, plan: Plan) -> int:
    """Bytes per element a norm keeps for backward: its input (:func:`residual_bytes`), and under the Hugging Face
    models' RMSNorm, which computes in fp32, the fp32 copy it normalises (4 more); Megatron-style fused norms
    (Transformer Engine's, Apex's ``FusedLayerNorm`` / ``FusedRMSNorm``) keep the input and per-row statistics
    only (Korthikanti et al. 2022 sec. 4.1: "LayerNorm ... stores its input with size 2sbh")."""
    r = residual_bytes(plan)
    return r if plan.framework == Framework.MEGATRON or not model.gated_mlp else 4 + r


def layer_activation_bytes(
    model: ModelProfile, plan: Plan, seq_len: int, *, cross_attention: bool = False, eager_attention: bool = False
) -> int:
    """Bytes one transformer block saves for backward at micro-batch ``plan.micro_batch_size``.

    The residual stream and the norms' inputs take :func:`residual_bytes` (fp32 under autocast over fp32 weights,
    16-bit over 16-bit weights); an RMSNorm also keeps its fp32 upcast (the Hugging Face models' RMSNorm computes
    in fp32), a LayerNorm its input only; matmul inputs, attention q/k/v/output and MLP intermediates are in the
    compute dtype; dropout masks are 1 byte per element; a GELU computed op by op in Python
    (:data:`~advisor.core.kernels.PYTHON_GELU_MODEL_TYPES`) three tensors of the MLP's width more. A frozen linear layer keeps no input (autograd saves a
    matmul's input for the weight gradient only): under adapters on the attention projections the MLP's last
    matmul keeps none (its other inputs are saved by the activation before it). Eager attention adds the softmax
    output (fp32 under autocast), its dropout mask and the 16-bit copy the next matmul saves (s x s per head).
    Checked against the calibrated families' columns in ``tests/engine/test_activation_classes.py``.

    Megatron-style layers (``Plan.framework`` megatron) keep what Korthikanti et al. 2022 sec. 4.1 count: norms
    their input only (:func:`norm_bytes`), the fused bias-GeLU / SwiGLU its input (the first matmul's output),
    recomputing the activation in backward (Megatron-Core ``bias_gelu_impl`` / ``bias_swiglu_impl``), and an unfused
    softmax its 16-bit output, dropout mask and dropout output (5as²b with dropout): 34sbh + 5as²b a GPT block in
    16 bits with dropout, 34sbh under FlashAttention, which keeps q, k, v and its output as the paper's attention
    block does.
    """
    b, s, h = plan.micro_batch_size, seq_len, model.hidden_size
    a = compute_bytes(plan)
    sbh = s * b * h
    sbf = s * b * model.ffn_size
    drop = 1 if model.dropout else 0
    norm = norm_bytes(model, plan) * sbh
    megatron = plan.framework == Framework.MEGATRON
    qkv_width = (model.num_attention_heads + 2 * model.num_key_value_heads) * model.head_dim
    inner = model.num_attention_heads * model.head_dim
    spec = Method.of(plan.method).spec
    frozen_mlp = spec.adapters and LoraTargets.of(plan.lora_targets).attention_only

    def attention() -> int:
        total = norm + a * sbh + a * s * b * qkv_width + a * s * b * inner + drop * sbh
        if eager_attention:
            scores = model.num_attention_heads * s * s * b
            if megatron:  # the fused scale-mask-softmax keeps its 16-bit output; dropout its mask and output
                total += scores * (a + drop + (a if drop else 0))
                return total
            # softmax output is fp32 (autocast runs softmax in fp32); the AV matmul saves its own
            # copy when dropout or a cast to the compute dtype made a new tensor
            total += scores * (4 + drop + (a if drop or (plan.precision != Precision.FP32) else 0))
        return total

    total = attention()
    if cross_attention:
        total += attention()
    if model.gated_mlp:  # gate and up outputs, the activation's output, their product (the down matmul's input);
        # a fused SwiGLU keeps no activation output: it recomputes silu from the gate
        total += norm + a * sbh + ((3 if frozen_mlp else 4) - (1 if megatron else 0)) * a * sbf
    else:  # the first matmul's output, the activation's (the second matmul's input); a Python tanh GELU three more
        python_gelu = 3 if model.model_type in PYTHON_GELU_MODEL_TYPES and not megatron else 0
        total += norm + a * sbh + ((1 if frozen_mlp else 2) + python_gelu) * a * sbf + drop * sbh
    return total


def fused_layer_savings(model: ModelProfile, plan: Plan, seq_len: int, mlp_bytes: float) -> int:
    """Bytes per transformer block that fused kernels do not keep for backward, at the plan's micro-batch.

    ``mlp_bytes``: what the unfused MLP keeps per s·b·ffn element (the calibrated ``layer_f`` or the structural
    formula's). Two stacks fuse:

    - torch.compile: AOTAutograd's min-cut partitioner saves the matmuls' outputs and recomputes pointwise ops in
      the backward (Ansel et al. 2024, "PyTorch 2", https://pytorch.org/assets/pytorch2-2.pdf sec. 4.3; the
      partitioner's docs, https://dev-discuss.pytorch.org/t/min-cut-optimal-recomputation-i-e-activation-
      checkpointing-with-aotautograd/467): the MLP keeps its first matmul's output(s) only (a·sbf, gated: 2a·sbf),
      RMSNorm its input and the inverse norm, not the fp32 normalised copy (4·sbh per norm), and dropout masks
      are regenerated from the RNG seed (Inductor's philox), not stored;
    - Liger-Kernel (llama-style models): RMSNorm keeps its input and 1/rms, SwiGLU its two inputs, recomputing
      silu (Hsu et al. 2024, https://arxiv.org/abs/2410.10989 sec. 3.1-3.3): 4·sbh per norm and a·sbf.

    Megatron-style layers are fused already (:func:`layer_activation_bytes`): nothing more.

    Not yet measured on a GPU: derived from which tensors each kernel saves.
    """
    if plan.framework == Framework.MEGATRON:
        return 0
    liger = LossKernel.of(plan.loss_kernel).spec.fused_layers and model.gated_mlp
    if not (plan.torch_compile or liger):
        return 0
    b, a = plan.micro_batch_size, compute_bytes(plan)
    sbh, sbf = seq_len * b * model.hidden_size, seq_len * b * model.ffn_size
    norms = 2 * 4 * sbh if model.gated_mlp else 0  # two RMSNorms a block: the fp32 normalised copy
    if plan.torch_compile:
        kept = (2 if model.gated_mlp else 1) * a
        masks = 3 * sbh if model.dropout else 0  # attention-output, MLP and residual dropout masks, 1 B each
        return int(norms + max(mlp_bytes - kept, 0) * sbf + masks)
    return int(norms + a * sbf)


def fused_loss_head_bytes(model: ModelProfile, plan: Plan, seq_len: int) -> int:
    """Bytes Liger's fused linear cross-entropy holds from the loss, in the forward, through the backward, per device:
    what its saving of the logits does not cover. Read from its source (``liger_kernel/ops/
    fused_linear_cross_entropy.py``, ``fused_linear_cross_entropy_forward``): it computes the gradients in the forward
    and saves them for the backward: ``grad_input = torch.zeros_like(_input)`` (tokens x h, the hidden state's dtype)
    and, when the head is trained (full fine-tuning; LoRA freezes it: None), ``grad_weight = torch.zeros_like(weight)``
    (V x h in the weight's dtype as the forward sees it: fp32 weights under autocast, the 16-bit gathered copy under
    ZeRO / FSDP mixed precision; vocabulary-parallel: V/t); and while it runs, one chunk of logits bounded to about
    tokens x h elements (``chunk_size = next_power_of_2(cdiv(BT, cdiv(V, H)))``). Under sharding the head's
    gradient is whole on every rank until the backward's reduce-scatter, where the other gradients are shards.
    0 for other losses. Not yet measured on a GPU."""
    if LossKernel.of(plan.loss_kernel).spec.grad_logits:
        return 0
    a, t = compute_bytes(plan), max(plan.tensor_parallel, 1)
    tokens = plan.micro_batch_size * seq_len * model.hidden_size * a * 2  # grad_input and one chunk of logits
    if Method.of(plan.method).spec.adapters:
        return tokens // t
    sharded = plan.precision != Precision.FP32 and Parallelism.of(plan.parallelism).stage
    width = 2 if sharded else WeightsDtype.of(plan.weights_dtype).bytes
    return (tokens + width * model.vocab_size * model.hidden_size) // t


def recomputed_block_bytes(c: dict, sbh: float, sbf: float, full_layer: float, encoder_decoder: bool) -> float:
    """Bytes of one checkpointed block's recomputable activations: a whole layer (``full_layer``, a calibration
    column ``c``'s per-layer terms at ``sbh`` and ``sbf`` elements), or where the column's layer is an encoder +
    decoder pair, its largest block, a decoder block: its self- and cross-attention (2 of the pair's 3 attention
    blocks) and about half of the other tensors. Checkpointing recomputes one block at a time."""
    if not encoder_decoder:
        return full_layer
    return (
        0.55 * c["layer_h"] * sbh
        + 0.5 * c["layer_f"] * sbf
        + (2 / 3) * (full_layer - c["layer_h"] * sbh - c["layer_f"] * sbf)
    )
