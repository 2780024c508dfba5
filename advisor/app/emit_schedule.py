"""The learning rate, warm-up and run length of the emitted ``training_args.json`` / ``sft_config.json``.

The values are the recommendation's, set by rule ``batch.recipe-learning-rate`` (:mod:`rules.batch`): the method's
published recipe (Stanford Alpaca for full fine-tuning, the QLoRA scripts for adapters), its rate scaled to the plan's
global batch by the square root of the ratio (rule ``batch.linear-lr-scaling``), 3 epochs and 3 % linear warm-up.
``recommend --tokens N`` replaces the epochs by ``max_steps``: N tokens at the plan's tokens per step (``compare``'s
count: every row's tokens without padding, :func:`advisor.engine.speed.estimate_speed`).

The keys are the Trainer's (https://huggingface.co/docs/transformers/main_classes/trainer#transformers.TrainingArguments:
``learning_rate``, ``num_train_epochs``, ``max_steps``, and the warm-up as ``warmup_steps`` given as a ratio below 1
from transformers 5 on, which deprecates ``warmup_ratio``; ``warmup_ratio`` before). TRL's ``SFTConfig`` inherits them.
A DeepSpeed config has no scheduler of its own here, so the Trainer's runs, with these values (its optimizer's
``"auto"`` learning rate is filled from them: https://huggingface.co/docs/transformers/deepspeed#optimizer-and-scheduler).
"""

from __future__ import annotations

import math
from typing import Any

from advisor.core.dimensions import Setting
from advisor.core.errors import UsageError
from advisor.core.limits import MAX_TOKENS
from advisor.engine.recommendation import Recommendation
from rules.batch import WARMUP_RATIO


def tokens_per_step(rec: Recommendation) -> int:
    """Tokens one optimizer step trains on, all devices: the speed estimate's tokens per second times its step time
    (rows x tokens per row, padding not counted), at least 1."""
    return max(round(rec.speed.tokens_per_s * rec.speed.step_time_s), 1)


def schedule_args(rec: Recommendation, transformers_major: int, tokens: int | None = None) -> dict[str, Any]:
    """The Trainer's learning-rate and run-length keys for ``rec`` (module docstring): ``learning_rate`` and the
    warm-up when the recommendation has a learning rate (none for pre-training from scratch: the Trainer's default
    stays), and ``max_steps`` = ceil(``tokens`` / :func:`tokens_per_step`) when ``tokens`` is given, else the
    recommendation's ``num_train_epochs``.

    Raises:
        UsageError: ``tokens`` not a whole number from 1 to :data:`advisor.core.limits.MAX_TOKENS`.
    """
    args: dict[str, Any] = {}
    rate = rec.settings.get(Setting.LEARNING_RATE)
    if rate is not None:
        args["learning_rate"] = rate.value
        args["warmup_steps" if transformers_major >= 5 else "warmup_ratio"] = WARMUP_RATIO
    if tokens is not None:
        if isinstance(tokens, bool) or not isinstance(tokens, int) or not 1 <= tokens <= MAX_TOKENS:
            raise UsageError(f"--tokens must be a whole number from 1 to {MAX_TOKENS:.0e}, got {tokens!r:.80}")
        args["max_steps"] = math.ceil(tokens / tokens_per_step(rec))
    elif (epochs := rec.settings.get(Setting.NUM_TRAIN_EPOCHS)) is not None:
        args["num_train_epochs"] = epochs.value
    return args
