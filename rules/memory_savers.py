"""Memory savers that cost speed: activation (gradient) checkpointing, full or selective."""

from __future__ import annotations

from probes.kernels import Checkpointing
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


@register
class SelectiveCheckpointing(Rule):
    id = "memory.selective-checkpointing"
    title = "selective activation checkpointing: priced when asked, run outside the Trainer"
    topic = "memory"
    sources = [S.SELECTIVE_AC_PAPER, S.TORCHTITAN_AC, S.TORCH_SAC]
    rationale = ("Selective checkpointing keeps what is expensive to recompute (attention, every other matmul's "
                 "output) or checkpoints only every second block: more memory than full checkpointing, less "
                 "recomputation. The HF Trainer checkpoints whole blocks only, so the planner never picks it; "
                 "estimate prices it for torchtitan, torchtune or a loop with create_selective_checkpoint_contexts.")

    def refuse(self, facts: Facts, plan: Plan) -> Effect | None:
        if Checkpointing.of(plan.checkpointing).selective and not plan.gradient_checkpointing:
            return self.forbid(Setting.CHECKPOINTING, plan.checkpointing,
                               "selective checkpointing is a kind of activation checkpointing: it needs "
                               "--gradient-checkpointing", hard=True)
        return None

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        if not (plan.gradient_checkpointing and Checkpointing.of(plan.checkpointing).selective):
            return []
        return [self.warn(f"{plan.checkpointing} checkpointing: the HF Trainer cannot run it; use torchtitan "
                          "(activation_checkpoint.mode = 'selective'), torchtune (ac_mode) or "
                          "torch.utils.checkpoint.create_selective_checkpoint_contexts in your own loop",
                          setting=Setting.CHECKPOINTING)]
