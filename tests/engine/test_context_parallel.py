"""Context parallelism (the table's ``context_parallel`` row): priced by the sequence each rank keeps, the ring's
key / value exchange and the batch replicas left, searched as a fallback for long context, emitted as accelerate's
ParallelismConfig, and refused where the trial or the simulation cannot run it."""

from __future__ import annotations

import pytest

from advisor.app.api import estimate, recommend
from advisor.core.dimensions import Consumer, refusal
from advisor.core.errors import UsageError
from advisor.engine.communication import ring_attention_seconds
from probes.gpu_catalog import catalog, gpu_info_from_catalog

LLAMA = "meta-llama/Llama-3.1-8B"
LONG = dict(
    gpu="h100-sxm:8", seq_len=131072, parallelism="fsdp-full-shard", micro_batch_size=1, gradient_checkpointing=True
)


def test_each_rank_keeps_its_share_of_the_sequence_and_the_batch_replicas_shrink() -> None:
    whole = estimate(LLAMA, **LONG)
    split = estimate(LLAMA, context_parallel=4, **LONG)
    assert split.plan.data_parallel_size == 2 and split.plan.shard_group_size == 8
    assert split.plan.global_batch_size == 2  # micro-batch 1 x accumulation 1 x 2 replicas
    ratio = whole.memory.components.activations_bytes / split.memory.components.activations_bytes
    assert 3.5 < ratio < 5  # activations of s/4 tokens (the loss's logits included)
    assert split.memory.components.optimizer_states_bytes == whole.memory.components.optimizer_states_bytes
    assert split.memory.device_bytes < whole.memory.device_bytes / 2 and not whole.memory.fits


def test_the_ring_exchanges_keys_and_values_not_hidden_states() -> None:
    """4 passes under checkpointing (forward, its recompute, backward's keys / values and their gradients) of 3/4 of
    b·s·2·kv 16-bit elements a layer, over one direction of NVLink."""
    from advisor.app.api import profile_model

    plan = estimate(LLAMA, context_parallel=4, **LONG).plan
    model, gpu = profile_model(LLAMA), gpu_info_from_catalog(catalog()["h100-sxm"])
    seconds = ring_attention_seconds(model, plan, 131072, gpu, nvlink=True)
    kv = 2 * model.num_key_value_heads * model.head_dim  # GQA: 2 x 8 x 128, a quarter of the hidden size
    expected = 4 * model.num_layers * 3 / 4 * 131072 * kv * 2 / (gpu.nvlink_bandwidth_gbps / 2 * 1e9)
    assert seconds == pytest.approx(expected)
    assert ring_attention_seconds(model, plan.model_copy(update={"context_parallel": 1}), 131072, gpu, True) == 0


@pytest.mark.slow
def test_long_context_on_8_h100s_splits_the_sequence() -> None:
    """The issue's command: 128k tokens x 8 on 8 H100s plans context parallel (SDPA, FSDP2), not tensor parallel 8,
    and --emit writes it (accelerate's ParallelismConfig: tests/app/test_emit_runs_priced.py loads it)."""
    rec = recommend(LLAMA, gpu="h100-sxm:8", seq_len=131072, global_batch_size=8)
    assert rec.plan.context_parallel > 1 and rec.plan.tensor_parallel == 1
    assert rec.plan.attention == "sdpa" and rec.plan.runs_fsdp2
    assert "context parallel" in rec.plan.describe()
    assert rec.estimate_only is None
    from advisor.app.emit import render

    files = render(rec, ["accelerate", "torchrun"])
    assert f"parallelism_config_cp_size: {rec.plan.context_parallel}" in files["accelerate_config.yaml"]
    assert f"export PARALLELISM_CONFIG_CP_SIZE={rec.plan.context_parallel}" in files["launch.sh"]


def test_context_parallel_is_refused_where_it_cannot_run() -> None:
    with pytest.raises(UsageError, match="FSDP2"):
        estimate(LLAMA, **{**LONG, "parallelism": "ddp"}, context_parallel=4)
    with pytest.raises(UsageError, match="single device"):
        estimate(LLAMA, gpu="h100-sxm", seq_len=4096, context_parallel=2)
    plan = estimate(LLAMA, context_parallel=4, **LONG).plan
    assert refusal(Consumer.TRIAL, plan) and refusal(Consumer.SIMULATE, plan) and refusal(Consumer.EMIT, plan) is None
