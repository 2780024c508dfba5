"""What several test modules build alike (they import it from here, not from each other)."""

from __future__ import annotations

from unittest import mock

#: a 2-layer gpt2 config a CPU trial runs in a second or two (tests/measure/test_validate.py, test_validate_adapters.py)
TINY_GPT2 = {
    "model_type": "gpt2",
    "architectures": ["GPT2LMHeadModel"],
    "n_layer": 2,
    "n_embd": 128,
    "n_head": 4,
    "n_positions": 256,
    "vocab_size": 1000,
}


def cpu_plan(**kw):
    """A one-process CPU plan (fp32, AdamW, micro-batch 8), ``kw`` overriding its fields."""
    from rules import Plan

    base = dict(
        device="cpu",
        precision="fp32",
        tf32=False,
        optimizer="adamw",
        gradient_checkpointing=False,
        micro_batch_size=8,
        gradient_accumulation_steps=1,
        parallelism="none",
        num_gpus=0,
    )
    base.update(kw)
    return Plan(**base)


def build_training_arguments(args: dict, rec):
    """TrainingArguments(**args) with the GPU checks answered as the planned hardware would."""
    import transformers
    import transformers.training_args as ta

    gpu = rec.hardware.gpu
    with (
        mock.patch.object(ta, "is_torch_bf16_gpu_available", return_value=bool(gpu and gpu.bf16)),
        mock.patch.object(ta, "is_torch_tf32_available", return_value=bool(gpu and gpu.tf32)),
        mock.patch.object(ta, "enable_tf32"),
        mock.patch.object(
            transformers.TrainingArguments, "world_size", new=property(lambda self: rec.plan.data_parallel_size)
        ),
    ):
        return transformers.TrainingArguments(**args)
