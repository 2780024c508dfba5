"""Routed experts priced as transformers 5.24 runs them (advisor/engine/experts.py): one grouped GEMM on SM80+, a
per-expert loop of small GEMMs on V100 / T4 and under torch.compile with weights that are not bf16, in the weights'
dtype, untouched by fp8; under QLoRA transformers 5 leaves the 3-D experts unquantized, which the card says."""

from __future__ import annotations

from advisor.app.api import estimate
from advisor.engine.experts import (
    GROUPED_MM,
    LOOP,
    expert_gemm_efficiency,
    experts_implementation,
    experts_in_fp32,
    loop_launch_seconds,
    routed_rows,
)
from probes.adapters import NF4_BYTES_PER_PARAM, unquantized_expert_bytes
from probes.gpu_catalog import gpu_info_from_catalog, parse_gpu_spec
from probes.model import profile_model
from rules import Plan
from conftest import cuda_plan  # noqa: E402

QWEN_MOE = "Qwen/Qwen3-30B-A3B"


def catalog_gpu(name: str):
    return gpu_info_from_catalog(parse_gpu_spec(name)[0])


def _plan(**kw) -> Plan:
    return cuda_plan(
        **{"gradient_checkpointing": True, "micro_batch_size": 2, "weights_dtype": "bf16", "torch_compile": False, **kw}
    )


def test_the_grouped_gemm_runs_on_sm80_and_newer_the_loop_below_and_under_compile_without_bf16() -> None:
    assert experts_implementation(_plan(), catalog_gpu("a100-80gb")) == GROUPED_MM
    assert experts_implementation(_plan(), catalog_gpu("h100-sxm")) == GROUPED_MM
    assert experts_implementation(_plan(precision="fp16", weights_dtype="fp32"), catalog_gpu("v100-32gb")) == LOOP
    assert experts_implementation(_plan(precision="fp16", weights_dtype="fp32"), catalog_gpu("t4")) == LOOP
    compiled_fp32 = _plan(weights_dtype="fp32", torch_compile=True)
    assert experts_in_fp32(compiled_fp32) and experts_implementation(compiled_fp32, catalog_gpu("h100-sxm")) == LOOP
    assert experts_implementation(_plan(torch_compile=True), catalog_gpu("h100-sxm")) == GROUPED_MM
    assert not experts_in_fp32(_plan(weights_dtype="fp32", parallelism="fsdp-full-shard", num_gpus=8))  # 16-bit copy


def test_small_per_expert_gemms_reach_less_than_one_grouped_gemm_and_pay_their_launches() -> None:
    model, gpu = profile_model(QWEN_MOE), catalog_gpu("a100-80gb")
    plan = _plan()
    assert routed_rows(model, plan, 2048) == 2 * 2048 * 8 / 128  # k·T/E = 256 rows an expert

    def curve(rows: float) -> float:
        return rows / (rows + 732.0)  # any curve rising with the rows

    grouped = expert_gemm_efficiency(model, plan, gpu, 2048, curve)
    assert grouped == curve(2 * 2048)  # the tokens' rows; 256 rows an expert: two full 128-row tiles, no padding
    assert expert_gemm_efficiency(model, _plan(micro_batch_size=1), gpu, 1000, curve) < curve(1000) * 0.7  # 62.5 → 128
    looped = expert_gemm_efficiency(model, plan, catalog_gpu("v100-32gb"), 2048, curve)
    assert looped == curve(256) < grouped / 3
    assert loop_launch_seconds(model, plan, gpu) == 0
    assert loop_launch_seconds(model, plan, catalog_gpu("v100-32gb")) == 48 * 128 * 6 * 10e-6


def test_moe_steps_on_a_v100_pay_for_the_loop_and_fp8_leaves_the_experts_in_bf16() -> None:
    kw = dict(seq_len=2048, micro_batch_size=1, gradient_checkpointing=True, precision="fp16", method="lora")
    moe_v100 = estimate(QWEN_MOE, gpu="v100-32gb", **kw).speed
    moe_a100 = estimate(QWEN_MOE, gpu="a100-80gb", **kw).speed
    # the A100 is about 2.5x the V100's fp16 peak; the loop's small GEMMs widen the gap well beyond it
    assert moe_a100.tokens_per_s > 4 * moe_v100.tokens_per_s
    # fp8 converts nn.Linear layers only: the routed experts' 3-D GEMMs keep their bf16 time
    kw = dict(gpu="h100-sxm", seq_len=2048, micro_batch_size=2, method="lora")
    moe = estimate(QWEN_MOE, fp8=True, **kw).speed.tokens_per_s / estimate(QWEN_MOE, **kw).speed.tokens_per_s
    dense = (
        estimate("meta-llama/Llama-3.1-8B", fp8=True, **kw).speed.tokens_per_s
        / estimate("meta-llama/Llama-3.1-8B", **kw).speed.tokens_per_s
    )
    assert 1.0 < moe < dense


def test_qlora_on_a_moe_warns_that_transformers_5_leaves_the_experts_in_16_bits() -> None:
    """transformers 5 quantizes nn.Linear layers only (quantizer_bnb_4bit.param_needs_quantization): the 3-D experts stay
    bf16; the estimate keeps transformers 4's NF4 experts (the published runs) and the card says how much more."""
    from advisor.app.api import recommend

    model = profile_model(QWEN_MOE)
    extra = unquantized_expert_bytes(model, 2)
    assert extra == int(model.routed_parameters * (2 - NF4_BYTES_PER_PARAM)) > 40 * 2**30
    assert unquantized_expert_bytes(profile_model("meta-llama/Llama-3.1-8B"), 2) == 0
    rec = recommend(QWEN_MOE, gpu="h100-sxm", method="qlora", seq_len=1024)
    warning = next(w.message for w in rec.warnings if "bitsandbytes' 4-bit loading" in w.message)
    assert f"{extra / 2**30:.1f} GiB more than this estimate" in warning
