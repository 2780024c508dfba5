"""NCCL's per-call latency (advisor/engine/collectives.py) against its tuning model's formula by hand."""

from __future__ import annotations

import pytest

from advisor.engine.collectives import bucket_calls, ring_latency_seconds


def test_ring_latency_follows_nccls_tuning_model_by_hand() -> None:
    """Simple protocol, ring: 8.4 µs + 3.4 µs an NVLink step (5.7 PCIe) + 9.6 µs a network step; an all-reduce takes
    twice the steps of an all-gather and, across nodes, 1.9x (NVIDIA/nccl src/graph/tuning.cc)."""
    assert ring_latency_seconds("all_gather", 8, 1, True) == pytest.approx((8.4 + 7 * 3.4) * 1e-6)
    assert ring_latency_seconds("reduce_scatter", 8, 1, False) == pytest.approx((8.4 + 7 * 5.7) * 1e-6)
    assert ring_latency_seconds("all_gather", 16, 2, True) == pytest.approx((8.4 + 14 * 3.4 + 9.6) * 1e-6)
    assert ring_latency_seconds("all_reduce", 16, 2, True) == pytest.approx(1.9 * (8.4 + 28 * 3.4 + 2 * 9.6) * 1e-6)
    assert ring_latency_seconds("all_reduce", 1, 1, True) == 0.0
    # 128 nodes of 8: a ring of 1024 ranks pays over 4 ms a call, what a per-layer collective adds at that scale
    assert ring_latency_seconds("all_gather", 1024, 128, True) > 4e-3
    with pytest.raises(ValueError):
        ring_latency_seconds("broadcast", 8, 1, True)


def test_buckets_round_up_and_nothing_sends_nothing() -> None:
    assert bucket_calls(25 * 2**20 + 1, 25 * 2**20) == 2
    assert bucket_calls(1, 25 * 2**20) == 1
    assert bucket_calls(0, 25 * 2**20) == 0
