"""Batch size: micro-batch, gradient accumulation, padding to tensor-core multiples, learning rate."""

from __future__ import annotations

import math

from advisor.core.limits import divisors
from advisor.core.vocabulary import Method, Objective, Optimizer, Precision
from advisor.core.dimensions import Setting
from rules import sources as S
from rules.base import Effect, Rule, register
from rules.facts import Facts, Plan


@register
class MicroBatchMultipleOf8(Rule):
    id = "batch.micro-batch-multiple-of-8"
    title = "GEMM dimensions a multiple of 8 under mixed precision: the micro-batch only where tokens are not"
    topic = "batch"
    sources = [S.HF_BATCH, S.NV_FC_BATCH, S.NV_TC_REQ]
    rationale = (
        "Tensor cores are used fully when GEMM dimensions are multiples of 8 (fp16/bf16). In a "
        "transformer the GEMMs' rows are the micro-batch's tokens (batch × sequence) and their columns the "
        "hidden size: a sequence length that is a multiple of 8 aligns the tokens whatever the micro-batch, "
        "so the micro-batch matters only when the sequence length is not aligned."
    )

    def propose(self, facts: Facts) -> list[Effect]:
        gpu = facts.gpu
        if gpu is None or not gpu.tensor_cores or facts.workload.seq_len % 8 == 0:
            return []
        # the micro-batches that can occur divide the global batch: its divisors, not every multiple up to it
        multiples = [d for d in divisors(facts.workload.global_batch_size) if d % 8 == 0]
        if not multiples:
            return []
        return [
            self.prefer(
                Setting.MICRO_BATCH_SIZE,
                multiples,
                f"sequence length {facts.workload.seq_len} is not a multiple of 8: a micro-batch that is "
                "keeps the tokens dimension of the tensor-core GEMMs aligned",
            )
        ]

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        gpu = facts.gpu
        tokens = plan.micro_batch_size * facts.workload.seq_len
        if gpu is None or plan.precision == Precision.FP32 or (tokens % 8 == 0 and facts.model.hidden_size % 8 == 0):
            return []
        what = (
            f"{plan.micro_batch_size} × {facts.workload.seq_len} = {tokens} tokens per micro-batch"
            if tokens % 8
            else f"hidden size {facts.model.hidden_size}"
        )
        return [
            self.warn(
                f"{what} is not a multiple of 8: the GEMMs fall off the tensor-core fast path; pad the "
                "sequence length to a multiple of 8",
                setting=Setting.MICRO_BATCH_SIZE,
            )
        ]


@register
class LargestMicroBatch(Rule):
    id = "batch.largest-micro-batch"
    title = "the largest micro-batch that fits, then accumulate"
    topic = "batch"
    sources = [S.HF_GRAD_ACC, S.HF_SCALE]
    rationale = (
        "Throughput grows with the micro-batch until the GPU is saturated: for a batch of 64 use 4 x 16, "
        "not 1 x 64. Fill the GPU's memory, then accumulate the rest."
    )

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        why = (
            "the micro-batch with the least memory within the memory objective's speed tolerance"
            if facts.workload.objective == Objective.MEMORY
            else "the micro-batch with the highest estimated throughput that fits"
        )
        return [
            self.set(
                Setting.MICRO_BATCH_SIZE,
                plan.micro_batch_size,
                f"{why}; "
                f"{plan.micro_batch_size} x {plan.gradient_accumulation_steps} accumulation"
                + (f" x {plan.data_parallel_size} GPUs" if plan.data_parallel_size > 1 else "")
                + f" = global batch {plan.global_batch_size}",
            )
        ]


@register
class AccumulationOnlyWhenNeeded(Rule):
    id = "batch.gradient-accumulation-only-when-needed"
    title = "gradient accumulation only when the global batch does not fit"
    topic = "batch"
    sources = [S.HF_GRAD_ACC, S.HF_SCALE]
    rationale = (
        "Accumulation reaches a global batch beyond memory at the cost of more, smaller passes; if the "
        "batch fits, accumulation only slows training. A larger effective batch may need the learning "
        "rate and warm-up adjusted, and short datasets get fewer optimizer steps."
    )

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        k = plan.gradient_accumulation_steps
        if k == 1:
            return [
                self.set(
                    Setting.GRADIENT_ACCUMULATION_STEPS,
                    1,
                    "the global batch fits in one pass per device: accumulation would only slow training",
                )
            ]
        return [
            self.set(
                Setting.GRADIENT_ACCUMULATION_STEPS,
                k,
                f"the global batch {plan.global_batch_size} does not fit at once: {k} micro-batches of "
                f"{plan.micro_batch_size} per optimizer step",
            ),
            self.warn(
                f"gradient accumulation ({k} steps) gives an effective batch of {plan.global_batch_size}: set the "
                "learning rate and warm-up for that batch, and expect fewer optimizer steps per epoch",
                setting=Setting.GRADIENT_ACCUMULATION_STEPS,
            ),
        ]


@register
class PadToMultipleOf8(Rule):
    id = "batch.pad-to-multiple-of-8"
    title = "pad sequence length and vocabulary to multiples of 8 (64 on A100 and H100 / H200)"
    topic = "batch"
    sources = [S.HF_FP16, S.HF_BATCH, S.NV_TC_REQ]
    rationale = (
        "fp16/bf16 speed-ups need every GEMM dimension a multiple of 8: pad sequences "
        "(tokenizer pad_to_multiple_of) and the embedding matrix (resize_token_embeddings(..., "
        "pad_to_multiple_of=N))."
    )

    def propose(self, facts: Facts) -> list[Effect]:
        gpu = facts.gpu
        if gpu is None or not gpu.tensor_cores:
            return []
        multiple = gpu.alignment_multiple
        effects = [
            self.set(
                Setting.PAD_TO_MULTIPLE_OF,
                multiple,
                f"tensor cores want GEMM dimensions in multiples of {multiple} on {gpu.name}",
            )
        ]
        seq = facts.workload.seq_len
        if seq % 8:
            effects.append(
                self.warn(
                    f"sequence length {seq} is not a multiple of 8: pad to {seq + (-seq) % 8}",
                    setting=Setting.PAD_TO_MULTIPLE_OF,
                )
            )
        vocab = facts.model.vocab_size
        if vocab % multiple:
            padded = vocab + (-vocab) % multiple
            effects.append(
                self.warn(
                    f"vocabulary {vocab} is not a multiple of {multiple}: "
                    f"model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of={multiple}) "
                    f"pads it to {padded}",
                    setting=Setting.PAD_TO_MULTIPLE_OF,
                )
            )
        return effects


@register
class LinearLearningRateScaling(Rule):
    id = "batch.linear-lr-scaling"
    title = "scale the learning rate with the global batch: square root for Adam-type optimizers, linear for SGD"
    topic = "batch"
    sources = [S.SQRT_SCALING, S.LINEAR_SCALING, S.HF_GRAD_ACC]
    rationale = (
        "When the global batch is multiplied by k (more GPUs, more accumulation), SGD's learning rate is "
        "multiplied by k with a warm-up (the linear rule, Goyal et al. 2017); for Adam-type optimizers the "
        "matching rule is the square root, lr × √k (Malladi et al. 2022, the SDE scaling rule for adaptive "
        "methods). DDP keeps each device's batch, so the global batch grows with the number of GPUs."
    )

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        if plan.data_parallel_size == 1 and plan.gradient_accumulation_steps == 1:
            return []
        batch = (
            f"global batch = {plan.micro_batch_size} x {plan.gradient_accumulation_steps} x "
            f"{plan.data_parallel_size} = {plan.global_batch_size}"
        )
        if Optimizer.of(plan.optimizer) == Optimizer.SGD:
            rule = "scale it linearly (lr x new/old, Goyal et al. 2017) with warm-up"
        else:
            rule = (
                f"{plan.optimizer} is adaptive (Adam-type): scale it by the square root (lr x sqrt(new/old), Malladi et al. "
                "2022), not linearly (lr x new/old, Goyal et al. 2017: for SGD), with warm-up"
            )
        return [self.warn(f"{batch}: if your learning rate was tuned for another batch, {rule}")]


#: A published recipe a starting learning rate comes from: the rate, the global batch it was tuned at (samples) and
#: the rule's words for it. Full fine-tuning: Stanford Alpaca (LLaMA-7B with the Trainer, AdamW: 2e-5 at 128);
#: adapters (LoRA and QLoRA alike, the same low-rank update): the QLoRA scripts (paged AdamW, 2e-4 at 16 for 7B and
#: 13B, 1e-4 for 33B and 65B). Taken as published, not fitted.
FULL_RECIPE = (2e-5, 128, "Stanford Alpaca's full fine-tuning recipe (2e-5 at batch 128)")
ADAPTER_RECIPE = (2e-4, 16, "the QLoRA scripts' adapter recipe (2e-4 at batch 16, 7B and 13B models)")
LARGE_ADAPTER_RECIPE = (1e-4, 16, "the QLoRA scripts' adapter recipe for 33B and 65B models (1e-4 at batch 16)")
#: Adapters over a model larger than this take the larger models' rate: between the scripts' 13B (2e-4) and 33B (1e-4).
LARGE_ADAPTER_PARAMETERS = 20e9
#: Epochs of the recipes: Alpaca's 3 (52k samples); the QLoRA scripts' 1,875 steps x 16 are about 3 passes over their
#: OASST1 data too. ``recommend --tokens N`` writes a run of N tokens instead, ``train.py --max-steps N`` a shorter one.
RECIPE_EPOCHS = 3
#: Linear warm-up over the first 3 % of the steps: both recipes' ``--warmup_ratio 0.03``.
WARMUP_RATIO = 0.03


def recipe_learning_rate(method: str, num_parameters: int, global_batch_size: int) -> tuple[float, str]:
    """A starting learning rate for fine-tuning with an Adam-type optimizer: the method's published recipe
    (:data:`FULL_RECIPE`, :data:`ADAPTER_RECIPE`, :data:`LARGE_ADAPTER_RECIPE`, both AdamW) scaled from the recipe's
    global batch to ``global_batch_size`` (samples) by the square root of the ratio, as rule
    ``batch.linear-lr-scaling`` says for adaptive optimizers (Malladi et al. 2022). Three significant digits.

    Returns:
        The learning rate and one line saying where it comes from.
    """
    if Method.of(method).spec.adapters:
        rate, batch, words = LARGE_ADAPTER_RECIPE if num_parameters > LARGE_ADAPTER_PARAMETERS else ADAPTER_RECIPE
    else:
        rate, batch, words = FULL_RECIPE
    scaled = float(f"{rate * math.sqrt(global_batch_size / batch):.3g}")
    if global_batch_size == batch:
        return scaled, f"{words}, at its batch"
    return scaled, (
        f"{words} x sqrt({global_batch_size}/{batch}) for global batch {global_batch_size} "
        "(rule batch.linear-lr-scaling)"
    )


@register
class RecipeLearningRate(Rule):
    id = "batch.recipe-learning-rate"
    title = "start from the method's published learning rate and run length, the rate scaled to the global batch"
    topic = "batch"
    sources = [S.ALPACA_RECIPE, S.QLORA_RECIPE, S.SQRT_SCALING, S.LINEAR_SCALING]
    rationale = (
        "The emitted files need a learning rate and a run length. Full fine-tuning starts from Stanford "
        "Alpaca's recipe (2e-5 at a global batch of 128, 3 epochs), LoRA and QLoRA from the QLoRA scripts' "
        "(2e-4 at 16 for 7B-13B models, 1e-4 for 33B-65B), both AdamW with 3 % warm-up; the rate is moved to "
        "the plan's global batch by the scaling rule (square root for Adam-type optimizers). A start to tune "
        "from, not a tuned value; pre-training from scratch and SGD are outside these recipes."
    )

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        if facts.workload.from_scratch or Optimizer.of(plan.optimizer) == Optimizer.SGD:  # no recipe (AdamW's both)
            return []
        rate, words = recipe_learning_rate(plan.method, facts.model.num_parameters, plan.global_batch_size)
        return [
            self.set(Setting.LEARNING_RATE, rate, f"{words}; {WARMUP_RATIO * 100:g} % linear warm-up, as both recipes"),
            self.set(
                Setting.NUM_TRAIN_EPOCHS,
                RECIPE_EPOCHS,
                f"{RECIPE_EPOCHS} passes over the data, as the "
                "recipes (recommend --tokens N: a run of N tokens; train.py --max-steps N: a shorter one)",
            ),
        ]
