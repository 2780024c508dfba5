"""Per-step fixed costs (advisor/engine/overheads.py): the kernel-launch floor, QLoRA's dequantization and the
per-module ops of ZeRO-3 / FSDP, by hand from the counted constants and through estimate."""

from __future__ import annotations

import pytest

from advisor.app.api import estimate
from advisor.engine.experts import LAUNCH_SECONDS
from advisor.engine.overheads import (
    KERNELS_PER_ADAPTER,
    KERNELS_PER_BLOCK,
    KERNELS_PER_STEP,
    dequant_bytes_per_param,
    dequant_seconds,
    kernels_per_micro_batch,
    launch_floor_seconds,
)
from probes.adapters import quantized_parameters
from probes.model import profile_model
from rules import Plan
from conftest import cuda_plan  # noqa: E402


def _plan(**kw) -> Plan:
    return cuda_plan(**{"weights_dtype": "bf16", "torch_compile": False, **kw})


def test_an_eager_step_launches_its_blocks_counted_kernels_and_more_under_checkpointing_and_adapters() -> None:
    llama = profile_model("meta-llama/Llama-2-7b-hf")
    eager = kernels_per_micro_batch(llama, _plan())
    assert eager == 32 * sum(KERNELS_PER_BLOCK["sixteen"]) + KERNELS_PER_STEP
    assert kernels_per_micro_batch(llama, _plan(gradient_checkpointing=True)) == eager + 32 * 40  # the forward again
    lora = kernels_per_micro_batch(llama, _plan(method="lora", lora_targets="all-linear"))
    assert lora == eager + 32 * 7 * KERNELS_PER_ADAPTER
    assert kernels_per_micro_batch(llama, _plan(torch_compile=True)) < eager / 2  # Inductor fuses the pointwise ops
    assert launch_floor_seconds(llama, _plan()) == pytest.approx(eager * LAUNCH_SECONDS)
    assert launch_floor_seconds(llama, _plan(device="cpu", precision="fp32", weights_dtype="fp32")) == 0.0


def test_zero3_fetches_each_linear_layer_in_its_hooks_even_on_one_gpu() -> None:
    llama = profile_model("meta-llama/Llama-2-7b-hf")
    plain = kernels_per_micro_batch(llama, _plan())
    zero3 = kernels_per_micro_batch(llama, _plan(parallelism="zero-3", offload="optimizer"))
    assert zero3 == plain + 32 * 7 * 5 * 2  # 7 linear layers a block, 5 ops a fetch, forward and backward


def test_qlora_dequantizes_every_weight_in_each_pass_at_the_counted_bytes() -> None:
    llama = profile_model("meta-llama/Llama-2-7b-hf")
    double = _plan(method="qlora", lora_targets="all-linear")
    assert dequant_bytes_per_param(double) == pytest.approx(0.5 + 17 / 64 + 2 + 2)
    assert dequant_bytes_per_param(double.model_copy(update={"double_quant": False})) == pytest.approx(4.5 + 4 / 64)
    assert dequant_bytes_per_param(double.model_copy(update={"weights_dtype": "fp32"})) == pytest.approx(
        dequant_bytes_per_param(double) + 2
    )
    seconds = dequant_seconds(llama, double, 1e12)
    assert seconds == pytest.approx(2 * quantized_parameters(llama) * dequant_bytes_per_param(double) / 1e12)
    checkpointed = double.model_copy(update={"gradient_checkpointing": True})
    assert dequant_seconds(llama, checkpointed, 1e12) == pytest.approx(1.5 * seconds)
    assert dequant_seconds(llama, _plan(method="lora"), 1e12) == 0.0
    # the dequantizations' kernels: 3 a linear layer a pass under double quantization
    assert (
        kernels_per_micro_batch(llama, double)
        - kernels_per_micro_batch(llama, _plan(method="lora", lora_targets="all-linear"))
        == 32 * 7 * 3 * 2
    )


def test_short_sequences_of_small_models_are_launch_bound_and_long_ones_are_not() -> None:
    """gpt2-xl under ZeRO-3 on one A100: 128 tokens a micro-batch take the launch floor, 8 x 1024 take their FLOPs."""
    kw = dict(gpu="a100-80gb", method="full", parallelism="zero-3", offload="optimizer")
    model = profile_model("gpt2-xl")
    short = estimate("gpt2-xl", seq_len=128, micro_batch_size=1, **kw)
    floor = launch_floor_seconds(model, _plan(parallelism="zero-3", offload="optimizer", weights_dtype="fp32"))
    assert short.speed.step_time_s >= floor
    long = estimate("gpt2-xl", seq_len=1024, micro_batch_size=8, **kw)
    assert long.speed.step_time_s > 5 * floor
    assert long.speed.tokens_per_s > 10 * short.speed.tokens_per_s
