"""The GEMM roofline (advisor/engine/gemm.py): shapes that match the FLOP count, ridge points and SM fill by hand."""

from __future__ import annotations

import pytest

from advisor.engine.gemm import SMS, _fill, fp8_speedup, gemm_shapes, roofline_share
from probes.model import profile_model


@pytest.mark.parametrize("name", ["meta-llama/Llama-2-7b-hf", "gpt2", "mistralai/Mixtral-8x7B-v0.1"])
def test_the_shapes_carry_the_matmul_parameters_one_token_uses(name: str) -> None:
    """Σ k·n over the forward GEMMs of one token = the active matmul parameters (a MoE's k routed experts' share)."""
    model = profile_model(name)
    per_token = sum(k * n * c * m for m, k, n, c in gemm_shapes(model, 1))
    assert per_token == pytest.approx(model.active_matmul_parameters, rel=0.02)


def test_the_fill_counts_tiles_against_the_sms_by_hand() -> None:
    assert _fill(256, 768, 108) == pytest.approx(2 * 6 / 108)  # 128 x 128 tiles: 2 x 6 of them
    assert _fill(8192, 4096, 132) == 1.0
    assert _fill(256, 768, None) == 1.0


def test_large_gemms_approach_the_top_and_hopper_sits_nearer_its_ridge() -> None:
    """Llama-2-7B over 8192 tokens: intensity in the thousands of FLOP/B, near the top on both GPUs; the H100's
    ridge (989 TFLOP/s over 0.8 x 3.35 TB/s = 369 FLOP/B) costs it more than the A100's (312 / (0.8 x 2.04) = 191)."""
    llama = profile_model("meta-llama/Llama-2-7b-hf")
    a100 = roofline_share(llama, 8192, 0.8, 312e12 / (0.8 * 2.039e12), SMS["a100-80gb"])
    h100 = roofline_share(llama, 8192, 0.8, 989e12 / (0.8 * 3.35e12), SMS["h100-sxm"])
    assert 0.65 < h100 < a100 < 0.8


def test_short_micro_batches_of_small_models_are_memory_and_fill_bound() -> None:
    gpt2 = profile_model("gpt2")
    ridge = 312e12 / (0.8 * 2.039e12)
    short, long = roofline_share(gpt2, 256, 0.8, ridge, 108), roofline_share(gpt2, 16384, 0.8, ridge, 108)
    assert short < 0.5 * long
    assert short < roofline_share(gpt2, 256, 0.8, ridge, None)  # idle SMs cost on top of the memory


def test_the_dense_roofline_leaves_the_routed_experts_to_their_own_pricing() -> None:
    """issue 43: engine/experts.py prices the routed experts' GEMMs; the dense layers' roofline no longer holds them."""
    ridge = 312e12 / (0.8 * 2.039e12)
    mixtral, llama = profile_model("mistralai/Mixtral-8x7B-v0.1"), profile_model("meta-llama/Llama-2-7b-hf")
    dense = gemm_shapes(mixtral, 4096, experts=False)
    assert len(dense) == len(gemm_shapes(mixtral, 4096)) - 2
    assert roofline_share(mixtral, 4096, 0.8, ridge, 108, experts=False) != roofline_share(
        mixtral, 4096, 0.8, ridge, 108
    )
    assert roofline_share(llama, 4096, 0.8, ridge, 108, experts=False) == roofline_share(llama, 4096, 0.8, ridge, 108)


def test_fp8_gains_little_on_small_gemms_and_approaches_twice_on_large_ones() -> None:
    """H100: torchao's casts (5 B an element cast) leave a short micro-batch slower in fp8 than in bf16; the gain grows
    with the rows towards 2x; Transformer Engine's fused casts and cached weights gain more at the same shape."""
    llama = profile_model("meta-llama/Llama-2-7b-hf")
    ridge, sms = 989e12 / (0.8 * 3.35e12), SMS["h100-sxm"]
    gains = [fp8_speedup(llama, tokens, 0.8, ridge, sms) for tokens in (512, 4096, 131072)]
    assert gains[0] < 1.0 < gains[1] < gains[2] < 2.0
    assert fp8_speedup(llama, 4096, 0.8, ridge, sms, fused_casts=True, micro_batches=8) > gains[1]


def test_a_tensor_parallel_rank_runs_its_own_share_of_each_layer() -> None:
    """Under tensor parallel t a rank holds 1/t of the heads, the MLP width and the vocabulary-parallel head
    (Megatron-LM's column / row-parallel layers); key / value heads fewer than t are replicated, one a rank. Narrow
    shards reach less of the peak: Llama-3.1-8B's key / value projections are 128 columns a rank at t = 8."""
    llama = profile_model("meta-llama/Llama-3.1-8B")  # 32 heads, 8 key / value heads of 128, ffn 14336
    whole, eighth = gemm_shapes(llama, 8192, split=1), gemm_shapes(llama, 8192, split=8)
    assert [s[2] for s in whole] == [4096, 1024, 4096, 14336, 4096, 128256]
    assert [s[2] for s in eighth] == [512, 128, 4096, 1792, 4096, 16032]
    assert [s[1] for s in eighth] == [4096, 4096, 512, 4096, 1792, 4096]
    assert gemm_shapes(llama, 8192, split=16)[1][2] == 128  # 8 key / value heads over 16 ranks: replicated
    ridge = 989.5e12 / (3.35e12 * 0.8)
    assert roofline_share(llama, 8192, 0.75, ridge, 132, split=8) < roofline_share(llama, 8192, 0.75, ridge, 132)
