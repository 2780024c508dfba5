"""The vocabulary rules read: the facts about a question and a candidate training plan."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from probes.hardware import GPUInfo, HardwareProfile
from probes.model import ModelProfile

PrecisionName = Literal["fp32", "fp16", "bf16"]
OptimizerName = Literal["adamw", "adafactor", "adamw-8bit", "sgd"]
ParallelismName = Literal["none", "dp", "ddp", "zero-1", "zero-2", "zero-3", "fsdp-shard-grad-op", "fsdp-full-shard",
                          "fsdp-hybrid-shard"]
OffloadName = Literal["none", "optimizer", "optimizer+parameters"]

PRECISIONS: tuple[PrecisionName, ...] = ("bf16", "fp16", "fp32")
OPTIMIZERS: tuple[OptimizerName, ...] = ("adamw", "adamw-8bit", "adafactor", "sgd")
PARALLELISMS: tuple[ParallelismName, ...] = ("none", "dp", "ddp", "zero-1", "zero-2", "zero-3", "fsdp-shard-grad-op",
                                             "fsdp-full-shard", "fsdp-hybrid-shard")
#: What each sharded data-parallel strategy shards, as a ZeRO stage (ZeRO paper, sec. 5: 1 optimizer
#: states, 2 + gradients, 3 + parameters). FSDP's strategies are ZeRO's counterparts (PyTorch FSDP docs,
#: ShardingStrategy): SHARD_GRAD_OP ~ ZeRO-2, FULL_SHARD ~ ZeRO-3, HYBRID_SHARD = FULL_SHARD inside a
#: node, replicated across nodes.
SHARDING_STAGE = {"zero-1": 1, "zero-2": 2, "zero-3": 3, "fsdp-shard-grad-op": 2, "fsdp-full-shard": 3,
                  "fsdp-hybrid-shard": 3}


def sharding_stage(parallelism: str) -> int:
    """The ZeRO stage a parallelism amounts to (0: nothing sharded)."""
    return SHARDING_STAGE.get(parallelism, 0)


def is_fsdp(parallelism: str) -> bool:
    """A PyTorch FSDP strategy (no DeepSpeed needed)."""
    return parallelism.startswith("fsdp-")


class Workload(BaseModel):
    """What the user wants to train: sequence length and global batch size."""

    seq_len: int = Field(description="tokens per sample (padded length)")
    global_batch_size: int = Field(
        description="samples per optimizer step = micro-batch size × gradient accumulation steps × data-parallel size")
    objective: Literal["speed", "memory"] = Field(
        "speed", description="what matters most: 'speed' (the fastest plan that fits) or 'memory' (the plan with "
                             "the least device memory)")


class Plan(BaseModel):
    """One candidate training configuration."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    device: Literal["cuda", "cpu"] = Field(description="where training runs")
    precision: PrecisionName = Field(description="fp32, or fp16 / bf16 mixed precision (autocast)")
    tf32: bool = Field(description="TF32 tensor-core math for fp32 matmuls (Ampere and newer)")
    optimizer: OptimizerName
    """adamw (torch AdamW), adamw-8bit (bitsandbytes), adafactor (transformers), sgd"""
    gradient_checkpointing: bool = Field(description="activation checkpointing: recompute activations in backward")
    micro_batch_size: int = Field(description="samples per device per forward/backward pass")
    gradient_accumulation_steps: int = Field(description="micro-batches per optimizer step")
    parallelism: ParallelismName = Field(description="'none' on one device; DDP, a ZeRO stage (DeepSpeed) or an FSDP "
                                                     "sharding strategy (PyTorch) across GPUs")
    num_gpus: int = Field(description="GPUs in all nodes (data-parallel size); 0 on the CPU")
    offload: OffloadName = Field("none", description="CPU offload: ZeRO-Offload, or FSDP's CPUOffload "
                                                     "(optimizer+parameters)")
    cpu_processes: int = Field(1, description="data-parallel training processes on the CPU (torchrun "
                                              "--nproc-per-node); 1 except for a CPU distributed trial")
    tensor_parallel: int = Field(1, description="GPUs each layer's matmuls are split over (Megatron-style tensor "
                                                "parallel), inside an NVLink island; 1: none")
    pipeline_parallel: int = Field(1, description="pipeline stages the layers are split into (1F1B schedule), "
                                                  "across nodes; 1: none")

    @property
    def model_parallel_size(self) -> int:
        """GPUs one model replica spans: tensor × pipeline parallel."""
        return max(self.tensor_parallel, 1) * max(self.pipeline_parallel, 1)

    @property
    def data_parallel_size(self) -> int:
        """Model replicas (GPUs / model-parallel size), or the CPU's processes: the factor between
        micro-batch × accumulation and the global batch."""
        if self.num_gpus > 0:
            return max(self.num_gpus // self.model_parallel_size, 1)
        return max(self.cpu_processes, 1)

    @property
    def global_batch_size(self) -> int:
        return self.micro_batch_size * self.gradient_accumulation_steps * self.data_parallel_size


class Facts(BaseModel):
    """Everything a rule may read."""

    hardware: HardwareProfile
    model: ModelProfile
    workload: Workload
    packages: dict[str, bool] = Field(
        default_factory=dict, description="optional packages found on this machine (bitsandbytes, deepspeed)")

    @property
    def gpu(self) -> GPUInfo | None:
        return self.hardware.gpu

    @property
    def on_cpu(self) -> bool:
        return self.hardware.gpu is None
