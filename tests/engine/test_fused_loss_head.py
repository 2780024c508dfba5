"""What Liger's fused linear cross-entropy holds beyond its chunk of logits (advisor/engine/structural.py
fused_loss_head_bytes, read from liger_kernel/ops/fused_linear_cross_entropy.py): the hidden state's gradient and,
when the head is trained, the head's whole gradient, both made in the forward and kept through the backward."""

from __future__ import annotations

import pytest

from advisor.app.api import estimate
from advisor.engine.structural import fused_loss_head_bytes
from probes.model import profile_model
from rules import Plan
from conftest import cuda_plan  # noqa: E402

GEMMA = "google/gemma-2-2b"


def _plan(**kw) -> Plan:
    return cuda_plan(
        **{"gradient_checkpointing": True, "micro_batch_size": 2, "loss_kernel": "liger", "weights_dtype": "bf16", **kw}
    )


def test_the_head_gradient_is_made_in_the_forward_in_the_weights_dtype() -> None:
    model = profile_model(GEMMA)
    v, h, s = model.vocab_size, model.hidden_size, 1024
    tokens = 2 * s * h * 2 * 2  # grad_input and one chunk of logits, bf16, micro-batch 2
    assert fused_loss_head_bytes(model, _plan(loss_kernel="standard"), s) == 0
    assert fused_loss_head_bytes(model, _plan(), s) == tokens + 2 * v * h
    assert fused_loss_head_bytes(model, _plan(weights_dtype="fp32"), s) == tokens + 4 * v * h  # autocast: fp32 head
    sharded = _plan(weights_dtype="fp32", parallelism="fsdp-full-shard", num_gpus=8)
    assert fused_loss_head_bytes(model, sharded, s) == tokens + 2 * v * h  # the gathered 16-bit copy
    lora = _plan(method="lora", lora_rank=16, lora_targets="all-linear")
    assert fused_loss_head_bytes(model, lora, s) == tokens  # a frozen head: grad_weight is None


def test_liger_full_fine_tuning_keeps_the_head_gradient_beside_the_activations() -> None:
    """Gemma-2-2B (256k vocabulary) under FSDP over 8 GPUs: the head's bf16 gradient, 1.1 GiB whole on every rank,
    outweighs what a shard of the other gradients holds; LoRA has none of it."""
    model = profile_model(GEMMA)
    kw = dict(
        gpu="a100-80gb:8",
        parallelism="fsdp-full-shard",
        weights_dtype="bf16",
        seq_len=1024,
        micro_batch_size=2,
        gradient_checkpointing=True,
        loss_kernel="liger",
    )
    full = estimate(GEMMA, method="full", **kw).memory
    lora = estimate(GEMMA, method="lora", lora_rank=16, **kw).memory
    head = 2 * model.vocab_size * model.hidden_size
    assert full.components.temporary_bytes >= head > full.components.gradients_bytes / 2
    assert lora.components.temporary_bytes < head
    assert full.peak_bytes > full.components.weights_bytes + full.components.optimizer_states_bytes + head


@pytest.mark.parametrize("method", ["full", "lora"])
def test_the_standard_loss_is_unchanged(method: str) -> None:
    model = profile_model(GEMMA)
    plan = _plan(
        loss_kernel="standard",
        method=method,
        **({"lora_rank": 16, "lora_targets": "all-linear"} if method == "lora" else {}),
    )
    assert fused_loss_head_bytes(model, plan, 4096) == 0
