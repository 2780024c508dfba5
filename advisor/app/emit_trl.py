"""TRL's ``SFTConfig`` of a recommendation (``--emit trl``: ``sft_config.json``): the Trainer's arguments
(:func:`advisor.app.emit.training_args`) with TRL's own settings, the ones the Trainer's files cannot run.

TRL's ``SFTTrainer`` runs activation offloading (``activation_offloading``: ``get_act_offloading_ctx_manager`` around
each forward), padding-free packing (``packing`` with the best-fit-decreasing strategy, ``padding_free``: one flattened
row per batch, FlashAttention's varlen kernels keep the samples apart) and always computes the loss through its fused
LM head, in chunks, without the full logits (``trl/trainer/sft_trainer.py``: ``add_fused_lm_head``): a chunked loss as
priced. It loads the model itself from ``model_init_kwargs`` (the load dtype, the attention kernel and QLoRA's
``quantization_config``: :func:`advisor.app.emit_model.model_kwargs`), and takes the adapters as
``peft_config=LoraConfig(**json.load(open("lora_config.json")))``.

Load it with ``HfArgumentParser(SFTConfig).parse_json_file("sft_config.json")[0]``, then
``SFTTrainer(model=model_id, args=config, train_dataset=..., peft_config=...)``. Sources:
https://huggingface.co/docs/trl/main/en/sft_trainer (``SFTConfig``: ``max_length``, ``packing``,
``packing_strategy``, ``padding_free``, ``activation_offloading``, ``model_init_kwargs``); the fields were checked
against TRL 1.16. ``SFTConfig`` differs from ``TrainingArguments`` in its defaults (``bf16`` None → on,
``gradient_checkpointing`` on, ``learning_rate`` 2e-5): every one the plan decides is written out.

No trl import: emitting stays on the fast path.
"""

from __future__ import annotations

from typing import Any

from advisor.app.emit_model import model_kwargs
from advisor.engine.recommendation import Recommendation

#: TRL's packing strategy for padding-free packing: best-fit decreasing, padding-free (``SFTConfig.packing_strategy``).
PACKING_STRATEGY = "bfd"


def sft_config(rec: Recommendation, training_args: dict[str, Any]) -> dict[str, Any]:
    """``trl.SFTConfig`` keyword arguments of the plan: ``training_args`` (the Trainer's, which ``SFTConfig``
    inherits) with ``max_length`` (the workload's sequence length), ``activation_offloading``, ``packing`` and
    ``padding_free`` as the plan has them, and ``model_init_kwargs`` (how SFTTrainer loads the model).

    ``remove_unused_columns`` (the Trainer's packing collator needs it off) is left to TRL, which tokenizes and
    collates itself.
    """
    plan = rec.plan
    args = {key: value for key, value in training_args.items() if key != "remove_unused_columns"}
    args |= {
        "max_length": rec.workload.seq_len,
        "activation_offloading": plan.activation_offloading,
        "packing": plan.packing,
        "padding_free": plan.packing,
        "model_init_kwargs": model_kwargs(rec),
    }
    if plan.packing:
        args["packing_strategy"] = PACKING_STRATEGY
    return args
