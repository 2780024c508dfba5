"""A training plan and the workload it is planned for: the words every layer speaks (values:
:mod:`advisor.core.vocabulary`).

A leaf of :mod:`advisor.core`: it imports nothing of the project outside it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from advisor.core.dimensions import STACK_SETTINGS
from advisor.core.kernels import Attention, Checkpointing, Framework, LossKernel
from advisor.core.vocabulary import (
    Device,
    LoraTargets,
    Method,
    Objective,
    Offload,
    Optimizer,
    Parallelism,
    Precision,
    WeightsDtype,
    literal,
)

PrecisionName = literal(Precision)
OptimizerName = literal(Optimizer)
ParallelismName = literal(Parallelism)
OffloadName = literal(Offload)
ObjectiveName = literal(Objective)
DeviceName = literal(Device)
MethodName = literal(Method)
WeightsDtypeName = literal(WeightsDtype)
LoraTargetsName = literal(LoraTargets)
AttentionName = literal(Attention)
LossKernelName = literal(LossKernel)
CheckpointingName = literal(Checkpointing)
FrameworkName = literal(Framework)

#: LoRA's rank when the user does not say: 16, between PEFT's default 8 and the QLoRA paper's 64 (QLoRA,
#: https://arxiv.org/abs/2305.14314 sec. 4: with adapters on every linear layer the rank barely matters;
#: LoRA, https://arxiv.org/abs/2106.09685 sec. 7.2: ranks 1-8 already work for attention adapters).
DEFAULT_LORA_RANK = 16
#: Adapters on every linear layer of the blocks (PEFT ``target_modules="all-linear"``): QLoRA sec. 4 found
#: this is what matches full fine-tuning's quality; attention-only adapters train fewer parameters.
DEFAULT_LORA_TARGETS = LoraTargets.ALL_LINEAR.value


class Workload(BaseModel):
    """What the user wants to train: sequence length, global batch size, and how (method, adapters)."""

    seq_len: int = Field(description="tokens per sample (padded length)")
    global_batch_size: int = Field(
        description="samples per optimizer step = micro-batch size × gradient accumulation steps × data-parallel size"
    )
    objective: ObjectiveName = Field(
        Objective.SPEED.value,
        description="what matters most: 'speed' (the fastest plan that fits) or 'memory' (the plan with "
        "the least device memory within 10 % of the fastest plan's tokens/s)",
    )
    method: MethodName | None = Field(
        None, description="the fine-tuning method asked for: full, lora or qlora; None: the planner chooses (auto)"
    )
    from_scratch: bool = Field(
        False, description="pre-training from random weights: every weight must train, so adapter methods are out"
    )
    lora_rank: int = Field(DEFAULT_LORA_RANK, ge=1, description="rank r of the LoRA adapters, when a plan uses them")
    lora_targets: LoraTargetsName = Field(DEFAULT_LORA_TARGETS, description="the linear layers that get adapters")
    mean_sample_len: int | None = Field(
        None,
        ge=1,
        description="average tokens per sample before padding (None: samples fill seq_len): what packing gains",
    )
    attention: AttentionName | None = Field(None, description="the attention kernel asked for (None: the planner's)")
    loss_kernel: LossKernelName | None = Field(None, description="the loss kernel asked for (None: the planner's)")
    packing: bool | None = Field(None, description="padding-free packing asked for or refused (None: the planner's)")
    fp8: bool | None = Field(None, description="fp8 linear layers asked for or refused (None: the planner's)")
    torch_compile: bool | None = Field(None, description="torch.compile asked for or refused (None: the planner's)")

    def pinned(self) -> dict[str, Any]:
        """The stack settings the user fixed (not None), by setting name."""
        return {k: v for k in STACK_SETTINGS if (v := getattr(self, k)) is not None}


class Plan(BaseModel):
    """One candidate training configuration."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    device: DeviceName = Field(description="where training runs")
    precision: PrecisionName = Field(description="fp32, or fp16 / bf16 mixed precision (autocast)")
    tf32: bool = Field(description="TF32 tensor-core math for fp32 matmuls (Ampere and newer)")
    optimizer: OptimizerName
    """adamw (torch AdamW), adamw-8bit (bitsandbytes), adafactor (transformers), sgd"""
    gradient_checkpointing: bool = Field(description="activation checkpointing: recompute activations in backward")
    micro_batch_size: int = Field(description="samples per device per forward/backward pass")
    gradient_accumulation_steps: int = Field(description="micro-batches per optimizer step")
    parallelism: ParallelismName = Field(
        description="'none' on one device; DDP, a ZeRO stage (DeepSpeed) or an FSDP "
        "sharding strategy (PyTorch) across GPUs"
    )
    num_gpus: int = Field(description="GPUs in all nodes (data-parallel size); 0 on the CPU")
    offload: OffloadName = Field(
        Offload.NONE.value, description="CPU offload: ZeRO-Offload, or FSDP's CPUOffload (optimizer+parameters)"
    )
    cpu_processes: int = Field(
        1,
        description="data-parallel training processes on the CPU (torchrun "
        "--nproc-per-node); 1 except for a CPU distributed trial",
    )
    tensor_parallel: int = Field(
        1,
        description="GPUs each layer's matmuls are split over (Megatron-style tensor "
        "parallel), inside an NVLink island; 1: none",
    )
    pipeline_parallel: int = Field(
        1, description="pipeline stages the layers are split into (1F1B schedule), across nodes; 1: none"
    )
    context_parallel: int = Field(
        1,
        ge=1,
        description="GPUs each sample's sequence is split over (context parallel: ring "
        "attention passes the keys and values around them), inside an "
        "NVLink island; the weights are replicated over them, or sharded "
        "with FSDP2; 1: none",
    )
    method: MethodName = Field(
        Method.FULL.value,
        description="full fine-tuning, or LoRA adapters over frozen 16-bit (lora) or 4-bit NF4 (qlora) base weights",
    )
    weights_dtype: WeightsDtypeName = Field(
        WeightsDtype.FP32.value,
        description="dtype the model is loaded in (torch_dtype): fp32 (AMP's fp32 "
        "master weights) or bf16 (pure bf16, no fp32 copy)",
    )
    lora_rank: int = Field(DEFAULT_LORA_RANK, description="rank r of the LoRA adapters (lora and qlora)")
    lora_targets: LoraTargetsName = Field(
        DEFAULT_LORA_TARGETS,
        description="linear layers with adapters: all-linear, attention (q, k, v, o) or q-v (q and v: PEFT's default)",
    )
    optimizer_in_backward: bool = Field(
        False,
        description="run each parameter's optimizer step as soon as its "
        "gradient is ready and free the gradient (torchtune "
        "optimizer_in_bwd): no accumulation, no clipping",
    )
    activation_offloading: bool = Field(
        False,
        description="move the tensors the forward saves for backward to pinned "
        "CPU RAM and back (TRL's SFTConfig activation_offloading, "
        "torchtune's OffloadActivations), CUDA streams overlapping "
        "the copies with compute; with checkpointing, each "
        "block's input",
    )
    expert_parallel: int = Field(
        1,
        description="expert parallel degree: GPUs of a data-parallel group that split a "
        "mixture of experts' routed experts (all-to-all token exchange); "
        "1: none",
    )
    attention: AttentionName = Field(
        Attention.SDPA.value,
        description="attention kernel (attn_implementation): "
        "eager keeps the s x s scores; sdpa and flash-attention-2/3 do not (default: "
        "sdpa on CUDA, eager on the CPU)",
    )
    loss_kernel: LossKernelName = Field(
        LossKernel.STANDARD.value,
        description="standard loss (fp32 logits), chunked "
        "cross-entropy (16-bit logits), liger (fused linear cross-entropy, RMSNorm, "
        "SwiGLU, RoPE kernels) or liger-layers (Liger's kernels but its fused loss)",
    )
    torch_compile: bool = Field(False, description="torch.compile the model (Inductor fuses elementwise ops)")
    packing: bool = Field(
        False, description="padding-free packing of several samples per row (position ids, DataCollatorWithFlattening)"
    )
    fp8: bool = Field(
        False,
        description="fp8 matmuls in the blocks' linear layers (torchao float8 / Transformer Engine; Ada and Hopper)",
    )
    checkpointing: CheckpointingName = Field(
        Checkpointing.FULL.value,
        description="what activation checkpointing "
        "recomputes: full (every block from its input: the Trainer's), "
        "selective-op or selective-layer (torchtitan's selective AC: keeps "
        "every other matmul's output, or checkpoints every second block)",
    )
    legacy_bitsandbytes: bool = Field(
        False,
        description="QLoRA on bitsandbytes older than 0.43.2, whose 4-bit layers "
        "keep their input for backward (default: the version "
        "installed here; no effect on other methods)",
    )
    double_quant: bool = Field(
        True,
        description="QLoRA's double quantization: the 4-bit base's absmax constants "
        "in 8 bits, 4.127 bits a weight (QLoRA sec. 3); off: 4.5 "
        "(transformers' BitsAndBytesConfig default, LitGPT's bnb.nf4); no "
        "effect on other methods",
    )
    framework: FrameworkName = Field(
        Framework.TRANSFORMERS.value,
        description="the training code priced: "
        "transformers + PEFT (the Trainer's; what --emit writes and trials run), "
        "LitGPT's own model and loops, or Megatron-style fused layers and optimizer "
        "(Megatron-Core, NeMo, Transformer Engine) (the last two: estimate only)",
    )
    virtual_pipeline: int = Field(
        1,
        ge=1,
        description="model chunks per pipeline stage, the interleaved 1F1B "
        "schedule (Megatron-LM's virtual_pipeline_model_parallel_size, torchtitan's "
        "Interleaved1F1B): the bubble shrinks v-fold; 1: plain 1F1B",
    )
    async_tp: bool = Field(
        False,
        description="tensor parallel's collectives overlapped with its matmuls "
        "(torchtitan's enable_async_tensor_parallel, under torch.compile): "
        "priced, not emitted; no effect without tensor parallel",
    )
    fsdp_version: int = Field(
        2,
        ge=1,
        le=2,
        description="the FSDP an FSDP plan runs: 2, fully_shard (per-parameter "
        "DTensor shards: --emit's fsdp_config version 2 on transformers 5, torchtitan, "
        "torchtune) or 1, FullyShardedDataParallel (FlatParameter: transformers 4, accelerate's "
        "default, LitGPT's FSDPStrategy); HYBRID_SHARD runs FSDP1 whatever this says, and "
        "so does transformers 4's Trainer from --emit's option string (accelerate config's "
        "fsdp_version aside)",
    )

    @model_validator(mode="before")
    @classmethod
    def _device_attention(cls, data: Any) -> Any:
        """Without an attention kernel, the device's default (:meth:`Attention.default`: eager on the CPU)."""
        if isinstance(data, dict) and data.get("attention") is None and "device" in data:
            data = {**data, "attention": Attention.default(data["device"]).value}
        return data

    @property
    def runs_fsdp2(self) -> bool:
        """Whether the plan shards with FSDP2's ``fully_shard`` (:attr:`fsdp_version` 2 on an FSDP strategy but
        HYBRID_SHARD, which the Trainer runs on FSDP1, and QLoRA, whose measured recipes (Answer.AI's fsdp_qlora, the
        alignment handbook's fsdp_qlora.yaml) are FSDP1: rule ``method.qlora-fsdp1``; --emit writes ``version: 1``)."""
        parallelism = Parallelism.of(self.parallelism)
        return (
            parallelism.fsdp
            and self.fsdp_version == 2
            and not parallelism.spec.replicated_across_nodes
            and not Method.of(self.method).spec.quantized_base
        )

    @property
    def model_parallel_size(self) -> int:
        """GPUs one model replica spans: tensor × pipeline parallel."""
        return max(self.tensor_parallel, 1) * max(self.pipeline_parallel, 1)

    @property
    def expert_parallel_size(self) -> int:
        """GPUs the routed experts are split over (1: every data-parallel rank holds every expert)."""
        return max(self.expert_parallel, 1)

    @property
    def data_parallel_size(self) -> int:
        """Batch replicas (GPUs / (model-parallel size × context parallel)), or the CPU's processes: the factor
        between micro-batch × accumulation and the global batch."""
        if self.num_gpus > 0:
            return max(self.num_gpus // (self.model_parallel_size * max(self.context_parallel, 1)), 1)
        return max(self.cpu_processes, 1)

    @property
    def shard_group_size(self) -> int:
        """GPUs that hold the same part of the model (GPUs / model-parallel size): the data-parallel replicas and,
        within each, the context-parallel ranks, which replicate the weights and reduce their gradients together
        (torchtitan shards FSDP over the dp × cp mesh); the CPU's processes on the CPU."""
        return self.data_parallel_size * max(self.context_parallel, 1) if self.num_gpus > 0 else self.data_parallel_size

    @property
    def global_batch_size(self) -> int:
        return self.micro_batch_size * self.gradient_accumulation_steps * self.data_parallel_size

    def describe(self, *, data_parallel: bool = True) -> str:
        """The plan in one short line: ``bf16 + tf32, adamw, micro-batch 8 × 4, checkpointing, ddp × 8 GPUs``
        (micro-batch × gradient accumulation steps; the data-parallel part only over several replicas, and
        only with ``data_parallel``)."""
        parts = [
            self.precision + (" + tf32" if self.tf32 else ""),
            self.optimizer,
            f"micro-batch {self.micro_batch_size} × {self.gradient_accumulation_steps}",
        ]
        if self.method != Method.FULL:
            parts.insert(0, f"{self.method} r={self.lora_rank} ({self.lora_targets})")
        if self.weights_dtype != WeightsDtype.FP32:
            parts.insert(1 if self.method != Method.FULL else 0, f"{self.weights_dtype} weights")
        if self.gradient_checkpointing:
            parts.append(
                "checkpointing" if self.checkpointing == Checkpointing.FULL else f"{self.checkpointing} checkpointing"
            )
        if self.activation_offloading:
            parts.append("activation offloading")
        if self.optimizer_in_backward:
            parts.append("optimizer step in backward")
        if self.expert_parallel > 1:
            parts.append(f"expert parallel {self.expert_parallel}")
        if self.offload != Offload.NONE:
            parts.append(f"{self.parallelism} with {self.offload} offload")
        if self.attention != Attention.default(self.device):
            parts.append(self.attention)
        loss = "liger layers" if self.loss_kernel == LossKernel.LIGER_LAYERS else f"{self.loss_kernel} loss"
        parts += [
            label
            for label, on in (
                (loss, self.loss_kernel != LossKernel.STANDARD),
                ("compile", self.torch_compile),
                ("packing", self.packing),
                ("fp8", self.fp8),
            )
            if on
        ]
        if Method.of(self.method).spec.quantized_base and not self.double_quant:
            parts.append("nf4 without double quantization")
        if self.legacy_bitsandbytes and Method.of(self.method).spec.quantized_base:
            parts.append("bitsandbytes < 0.43.2")
        if self.framework != Framework.TRANSFORMERS:
            parts.append(f"{self.framework}'s code")
        if self.async_tp and self.tensor_parallel > 1:
            parts.append("async TP")
        if self.context_parallel > 1:  # the strategy spans the replicas and their context-parallel ranks
            parts.append(f"context parallel {self.context_parallel}")
        if data_parallel and self.shard_group_size > 1:
            parts.append(f"{self.parallelism} × {self.shard_group_size} {'GPUs' if self.num_gpus else 'processes'}")
        return ", ".join(parts)
