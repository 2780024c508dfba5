"""The DeepSpeed config of a ZeRO plan (``--emit deepspeed``: ``ds_config.json``).

Source of the format: https://www.deepspeed.ai/docs/config-json/ (batch size, fp16 / bf16, ZeRO optimizations, offload:
``offload_optimizer`` at stages 1-3, ``offload_param`` at stage 3, NVMe for both at stage 3,
https://www.deepspeed.ai/docs/config-json/#optimizer-offloading); the Trainer integration:
https://huggingface.co/docs/transformers/deepspeed. No deepspeed import: emitting stays on the fast path.
"""

from __future__ import annotations

from typing import Any

from advisor.app.emit_model import NVME_PATH
from advisor.engine.recommendation import Recommendation
from advisor.engine.states import zero_bucket_elements
from advisor.core.vocabulary import Offload, Parallelism, Precision

#: DeepSpeed's dynamic loss scaling defaults (config-json, "FP16 training options").
DS_FP16 = {
    "enabled": True,
    "loss_scale": 0,
    "initial_scale_power": 16,
    "loss_scale_window": 1000,
    "hysteresis": 2,
    "min_loss_scale": 1,
}


def _offload_section(offload: Offload) -> dict[str, Any]:
    """A ZeRO ``offload_optimizer`` / ``offload_param`` section: CPU RAM, or NVMe (ZeRO-Infinity) under
    :data:`NVME_PATH`; pinned host memory (DeepSpeed's default, for full-bandwidth transfers)."""
    if offload.nvme:
        return {"device": "nvme", "nvme_path": NVME_PATH, "pin_memory": True}
    return {"device": "cpu", "pin_memory": True}


def deepspeed_config(rec: Recommendation) -> dict[str, Any] | None:
    """The DeepSpeed config of a ZeRO plan (None otherwise).

    ``train_batch_size`` = micro-batch × accumulation × data-parallel size (DeepSpeed checks this).
    With offload, DeepSpeed's own AdamW (CPU Adam), whose hyper-parameters the Trainer fills ("auto"); the
    offload goes to CPU RAM, or to NVMe under :data:`NVME_PATH` (ZeRO-Infinity, stage 3). The bucket sizes are
    the ones the memory model priced (:func:`advisor.engine.states.zero_bucket_elements`: ``overlap_comm`` holds
    about 4.5 × their 16-bit bytes).
    """
    if not Parallelism.of(rec.plan.parallelism).deepspeed:
        return None
    plan = rec.plan
    zero: dict[str, Any] = {
        "stage": Parallelism.of(plan.parallelism).stage,
        "overlap_comm": True,
        "contiguous_gradients": True,
    }
    bucket = zero_bucket_elements(rec.model)  # the bucket sizes the memory figure priced (engine.states)
    zero["reduce_bucket_size"] = bucket
    if zero["stage"] >= 3:
        zero["stage3_prefetch_bucket_size"] = int(0.9 * bucket)
    else:
        zero["allgather_bucket_size"] = bucket
    offload = Offload(plan.offload)
    if offload.optimizer:
        zero["offload_optimizer"] = _offload_section(offload)
    if offload.parameters:
        zero["offload_param"] = _offload_section(offload)
    config: dict[str, Any] = {
        "train_batch_size": plan.global_batch_size,
        "train_micro_batch_size_per_gpu": plan.micro_batch_size,
        "gradient_accumulation_steps": plan.gradient_accumulation_steps,
        "zero_optimization": zero,
        "bf16": {"enabled": plan.precision == Precision.BF16},
        "fp16": dict(DS_FP16) if plan.precision == Precision.FP16 else {"enabled": False},
    }
    if offload.optimizer:
        config["optimizer"] = {
            "type": "AdamW",
            "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"},
        }
    return config
