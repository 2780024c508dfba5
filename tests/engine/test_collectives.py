"""NCCL's per-call latency (advisor/engine/collectives.py) against its tuning model's formula by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.engine.collectives import bucket_calls, ring_latency_seconds
from conftest import cuda_plan
from probes.model import profile_model

ROOT = Path(__file__).resolve().parents[2]


def test_ring_latency_follows_nccls_tuning_model_by_hand() -> None:
    """Simple protocol, ring: 8.4 µs + 3.4 µs an NVLink step (5.7 PCIe) + 14 µs a network step; an all-reduce takes
    twice the steps of an all-gather and, across nodes, 1.4x on an A100 or newer, 1.9x on a V100 (NVIDIA/nccl
    src/graph/tuning.cc)."""
    assert ring_latency_seconds("all_gather", 8, 1, True) == pytest.approx((8.4 + 7 * 3.4) * 1e-6)
    assert ring_latency_seconds("reduce_scatter", 8, 1, False) == pytest.approx((8.4 + 7 * 5.7) * 1e-6)
    assert ring_latency_seconds("all_gather", 16, 2, True) == pytest.approx((8.4 + 14 * 3.4 + 14) * 1e-6)
    assert ring_latency_seconds("all_reduce", 16, 2, True) == pytest.approx(1.4 * (8.4 + 28 * 3.4 + 2 * 14) * 1e-6)
    volta = ring_latency_seconds("all_reduce", 16, 2, True, (7, 0))
    assert volta == pytest.approx(1.9 * (8.4 + 28 * 3.4 + 2 * 14) * 1e-6)
    assert ring_latency_seconds("all_reduce", 1, 1, True) == 0.0
    # 128 nodes of 8: a ring of 1024 ranks pays over 4 ms a call, what a per-layer collective adds at that scale
    assert ring_latency_seconds("all_gather", 1024, 128, True) > 4e-3
    with pytest.raises(ValueError):
        ring_latency_seconds("broadcast", 8, 1, True)


def test_an_all_reduce_takes_nccls_faster_algorithm_the_tree_across_many_nodes() -> None:
    """DDP's 25 MiB bucket over 16 nodes of 8 A100s (8 x 200 Gb/s a node): the ring pays 1.4 x (8.4 + 224 NVLink
    steps + 30 network steps) µs, the tree 6.8 + 2 x (7 NVLink levels x 4 + 4 network levels x 14) µs at 0.46 of the
    bus bandwidth times 0.7 (its correction at 2^18 x 64 B): the tree; a 1 GiB buffer on 2 nodes: the ring."""
    from advisor.engine.collectives import all_reduce_seconds

    bus, bucket = 200e9, 25 * 2**20
    ring = 1.4 * (8.4 + 224 * 3.4 + 30 * 14) * 1e-6 + 2 * 127 / 128 * bucket / bus
    tree = (6.8 + 2 * (7 * 4.0 + 4 * 14)) * 1e-6 + bucket / (0.5 * 0.92 * 0.7 * bus)
    assert tree < ring
    assert all_reduce_seconds(bucket, bus, 128, 16, True) == pytest.approx(tree)
    big = 2**30
    assert all_reduce_seconds(big, bus, 16, 2, True) == pytest.approx(
        1.4 * (8.4 + 28 * 3.4 + 2 * 14) * 1e-6 + 2 * 15 / 16 * big / bus
    )
    assert all_reduce_seconds(bucket, bus, 1, 1, True) == 0.0


def test_buckets_round_up_and_nothing_sends_nothing() -> None:
    assert bucket_calls(25 * 2**20 + 1, 25 * 2**20) == 2
    assert bucket_calls(1, 25 * 2**20) == 1
    assert bucket_calls(0, 25 * 2**20) == 0


def test_zero3_gathers_a_block_again_for_its_recomputation_only_past_the_reuse_distance() -> None:
    """DeepSpeed keeps a parameter used again within stage3_max_reuse_distance (1e9 elements): a checkpointed block
    of more is released after its recomputation and fetched again for its backward; each pass is one call per linear
    layer (its fetched submodules)."""
    from advisor.engine.collectives import linears_per_block, zero3_fetches, zero3_gathers
    from advisor.engine.communication import communication_seconds
    from probes.gpu_catalog import profile_from_catalog

    assert zero3_gathers(1.8e9, True) == 3 and zero3_gathers(1.8e9, False) == 2 and zero3_gathers(2e8, True) == 2
    small, large = profile_model("gpt2"), profile_model("meta-llama/Llama-3.1-70B")
    assert linears_per_block(small) == 6 and linears_per_block(large) == 7
    assert zero3_fetches(large) == 80 * 7
    gpu = profile_from_catalog("a100-80gb", 1).gpus[0]

    def seconds(model, ckpt: bool) -> float:
        plan = cuda_plan(tf32=False, gradient_checkpointing=ckpt, num_gpus=512, parallelism="zero-3")
        return communication_seconds(model, plan, gpu, True, 64, compute_s_per_micro=0.0)

    # 70B's blocks hold 0.86e9 elements each: kept between recomputation and backward, the same traffic
    assert seconds(large, True) == pytest.approx(seconds(large, False))
    # the Megatron-LM paper's 174.6B GPT: 1.8e9 a block, gathered three times a micro-batch with checkpointing
    gpt = profile_model(str(ROOT / "benchmarks" / "published" / "configs" / "megatron-lm-paper--gpt-174p6b"))
    assert seconds(gpt, True) / seconds(gpt, False) == pytest.approx(4 / 3, rel=0.02)


def test_weights_sharded_over_hundreds_of_ranks_band_apart() -> None:
    """The step-time bands keep ZeRO-3 / FSDP over more than 256 ranks (rules.fsdp.WIDE_SHARDING_RANKS), where the
    published runs sit furthest from their price, apart from the sharded runs on fewer GPUs."""
    from advisor.engine.bands import plan_class

    def plan(parallelism: str, gpus: int):
        return cuda_plan(tf32=False, gradient_checkpointing=True, num_gpus=gpus, parallelism=parallelism)

    assert plan_class(plan("zero-3", 512), 8) == "full/weights-wide/sm8"
    assert plan_class(plan("fsdp-full-shard", 256), 8) == "full/weights/sm8"
    assert plan_class(plan("zero-2", 512), 8) == "full/states/sm8"
