"""benchmarks/eager_traffic.py: the op-by-op traffic count behind the H100 step-time diagnosis (issue 13)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow  # the torch / transformers stack, simulations or trials (tests/conftest.py)

torch = pytest.importorskip("torch")

from benchmarks.eager_traffic import counted_traffic, traffic_mode  # noqa: E402


def test_elementwise_ops_count_their_inputs_and_outputs_matmuls_and_views_apart() -> None:
    a, b = torch.ones(1000), torch.ones(1000)
    mode = traffic_mode()
    with mode:
        c = a + b  # reads 2 x 4000 bytes, writes 4000
        c.view(10, 100).t()  # views: no kernel
        torch.ops.aten._unsafe_view(c, [10, 100])  # a reshape without a view's annotation: no kernel either
        c.numel()
        torch.ones(10, 100) @ torch.ones(100, 10)  # a matmul: compute
    assert mode.by_op["add"] == 12000
    assert mode.compute_bytes == 4000 + 4000 + 400
    assert mode.traffic == 12000 + mode.by_op.get("ones", 0)  # ones writes its output: a fill kernel


def test_a_step_counts_more_than_its_saved_activations(tmp_path) -> None:
    pytest.importorskip("transformers")
    from advisor.app import api
    from advisor.engine.memory import activation_traffic_bytes

    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "model_type": "gpt2",
                "architectures": ["GPT2LMHeadModel"],
                "n_layer": 2,
                "n_embd": 128,
                "n_head": 4,
                "n_positions": 256,
                "vocab_size": 1000,
            }
        )
    )
    est = api.estimate(
        str(config),
        gpu="h100-sxm",
        seq_len=128,
        micro_batch_size=4,
        global_batch_size=4,
        precision="bf16",
        torch_compile=False,
    )
    mode = counted_traffic(est.model, est.plan, 128)
    priced = activation_traffic_bytes(est.model, est.plan, 128) * 3
    # the forward writes and the backward reads back far more than the tensors kept for backward: casts, norms,
    # GELU's chain, dropout, the loss's float32 logits
    assert mode.traffic > 1.5 * priced
    assert {"_to_copy", "mul", "add"} <= set(mode.by_op)


def test_a_moe_blocks_counted_routing_is_what_the_traffic_model_adds() -> None:
    """benchmarks/count_moe_routing.py: one Qwen3-30B-A3B block's count beyond its dense kin's column, on fake tensors
    with the grouped GEMMs as compute, is within 5 % of traffic.routing_traffic_bytes' block (ROUTING_BYTES was fitted
    to these counts; this pins the constants to transformers' code as installed)."""
    pytest.importorskip("transformers")
    from benchmarks.count_moe_routing import _step

    model, f1, t1, pf1, p1 = _step("Qwen/Qwen3-30B-A3B", 1, 1, 512)
    _, f2, t2, pf2, p2 = _step("Qwen/Qwen3-30B-A3B", 2, 1, 512)
    unpriced = (t2 - t1) - (p2 - p1)
    from advisor.engine.traffic import routing_traffic_bytes
    from conftest import cuda_plan

    one_block = (
        routing_traffic_bytes(model, cuda_plan(micro_batch_size=1, weights_dtype="bf16"), 512) / model.moe_layers
    )
    assert unpriced == pytest.approx(one_block, rel=0.05)
