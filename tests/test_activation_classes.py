"""Which tensors a step keeps depends on the class of step, not only on the precision: the residual stream's dtype
(fp32 weights under autocast, or 16-bit weights, which is also ZeRO's and FSDP's compute), frozen layers (LoRA keeps
no input for a frozen weight; QLoRA's bitsandbytes layers do) and tensor parallelism with sequence parallelism.
Each class has its own calibrated column (``advisor/engine/memory.py:calibration_keys``)."""

from __future__ import annotations

import pytest

from advisor.engine.memory import _calibration, calibration_keys, estimate_memory
from probes.model import profile_model
from rules import Plan

LLAMA = "meta-llama/Llama-2-7b-hf"
GIB = 2**30


def _plan(**kw) -> Plan:
    base = dict(device="cuda", precision="bf16", tf32=True, optimizer="adamw", gradient_checkpointing=False,
                micro_batch_size=2, gradient_accumulation_steps=1, parallelism="none", num_gpus=1)
    return Plan(**{**base, **kw})


def _activations(model: str = LLAMA, seq: int = 1024, **kw) -> int:
    return estimate_memory(profile_model(model), _plan(**kw), seq, 80 * GIB).components.activations_bytes


def test_each_class_names_its_column_most_specific_first() -> None:
    assert calibration_keys(_plan(precision="fp32")) == ["fp32"]
    assert calibration_keys(_plan()) == ["mixed"]
    assert calibration_keys(_plan(weights_dtype="bf16")) == ["bf16", "mixed"]
    assert calibration_keys(_plan(weights_dtype="bf16", method="lora", lora_targets="attention")) == [
        "bf16+lora-attention", "bf16", "mixed"]
    # ZeRO and FSDP compute with 16-bit parameters: the 16-bit column even over fp32 weights
    assert calibration_keys(_plan(parallelism="zero-2", num_gpus=8))[0] == "bf16"
    assert calibration_keys(_plan(parallelism="fsdp-full-shard", num_gpus=8))[0] == "bf16"
    # QLoRA's 4-bit layers keep their inputs: the full fine-tuning column for attention-only adapters
    assert calibration_keys(_plan(weights_dtype="bf16", method="qlora", lora_targets="attention"))[0] == "bf16"
    assert calibration_keys(_plan(weights_dtype="bf16", method="qlora", lora_targets="all-linear"))[0] == (
        "bf16+lora-all-linear")


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2", "gemma", "phi3", "gpt2"])
def test_the_decoder_families_have_every_column(family) -> None:
    table = _calibration()[family]["causal-lm"]
    assert {"fp32", "mixed", "bf16", "bf16+lora-all-linear"} <= set(table)


def test_a_16_bit_residual_stream_keeps_less_than_autocasts_fp32_one() -> None:
    mixed, pure = _activations(), _activations(weights_dtype="bf16")
    assert pure < 0.8 * mixed
    # the same class under ZeRO-2 over fp32 weights
    assert _activations(parallelism="zero-2", num_gpus=8) == pure


def test_frozen_layers_keep_no_inputs_but_qloras_4_bit_layers_do() -> None:
    full = _activations(weights_dtype="bf16")
    lora = _activations(weights_dtype="bf16", method="lora", lora_targets="attention")
    qlora = _activations(weights_dtype="bf16", method="qlora", lora_targets="attention")
    assert lora < full  # the MLP's down projection keeps no input
    assert qlora == full  # bitsandbytes' MatMul4Bit saves its input: what full fine-tuning keeps
    all_linear = _activations(weights_dtype="bf16", method="lora", lora_targets="all-linear")
    assert lora < all_linear


def test_tensor_parallel_with_sequence_parallelism_splits_every_activation() -> None:
    one = _activations(weights_dtype="bf16")
    assert _activations(weights_dtype="bf16", tensor_parallel=8, num_gpus=8) == pytest.approx(one / 8, rel=1e-6)
