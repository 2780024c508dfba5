"""Memory savers that cost speed: activation (gradient) checkpointing."""

from __future__ import annotations

from probes.vocabulary import Penalty, Setting
from rules import sources as S
from rules.base import Effect, Rule, register
from rules.facts import Facts, Plan


@register
class CheckpointingOnlyWhenNeeded(Rule):
    id = "memory.checkpointing-only-when-needed"
    title = "activation checkpointing only when needed to fit"
    topic = "memory"
    sources = [S.HF_CKPT, S.CHECKPOINT_PAPER]
    rationale = ("Checkpointing keeps only each layer's input and recomputes the rest in the backward pass: "
                 "activations shrink to about O(sqrt(n)) but training gets about 20-30 % slower.")

    def propose(self, facts: Facts) -> list[Effect]:
        return [self.fallback(Setting.GRADIENT_CHECKPOINTING, True,
                              "recomputes the forward pass in backward (~20-30 % slower): only when needed to fit",
                              penalty=Penalty.SLOWER)]

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        if not plan.gradient_checkpointing:
            return []
        return [self.warn("activation checkpointing is on because nothing faster fits: expect ~20-30 % lower "
                          "throughput than without it", setting=Setting.GRADIENT_CHECKPOINTING)]


@register
class CheckpointingUnsupported(Rule):
    id = "memory.checkpointing-unsupported"
    title = "no checkpointing for a model class that does not support it"
    topic = "memory"
    sources = [S.HF_CKPT]
    rationale = "transformers enables checkpointing only for models with supports_gradient_checkpointing."

    def propose(self, facts: Facts) -> list[Effect]:
        if facts.model.supports_gradient_checkpointing:
            return []
        return [self.forbid(Setting.GRADIENT_CHECKPOINTING, True,
                            f"{facts.model.model_type} does not support gradient_checkpointing_enable()", hard=True)]
