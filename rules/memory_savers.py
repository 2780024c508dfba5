"""Memory savers that cost speed: activation (gradient) checkpointing, full or selective, and activation offloading."""

from __future__ import annotations

from advisor.core.kernels import Checkpointing, Framework
from advisor.core.vocabulary import Device, Penalty
from advisor.core.dimensions import Setting
from rules import sources as S
from rules.base import Effect, Rule, register
from rules.facts import Facts, Plan


@register
class CheckpointingOnlyWhenNeeded(Rule):
    id = "memory.checkpointing-only-when-needed"
    title = "activation checkpointing only when needed to fit"
    topic = "memory"
    sources = [S.HF_CKPT, S.CHECKPOINT_PAPER]
    rationale = (
        "Checkpointing keeps only each layer's input and recomputes the rest in the backward pass: "
        "activations shrink to about O(sqrt(n)) but training gets about 20-30 % slower."
    )

    def propose(self, facts: Facts) -> list[Effect]:
        return [
            self.fallback(
                Setting.GRADIENT_CHECKPOINTING,
                True,
                "recomputes the forward pass in backward (~20-30 % slower): only when needed to fit",
                penalty=Penalty.SLOWER,
            )
        ]

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        if not plan.gradient_checkpointing:
            return []
        return [
            self.warn(
                "activation checkpointing recomputes the forward pass in backward: expect ~20-30 % lower "
                "throughput than without it",
                setting=Setting.GRADIENT_CHECKPOINTING,
            )
        ]


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
        return [
            self.forbid(
                Setting.GRADIENT_CHECKPOINTING,
                True,
                f"{facts.model.model_type} does not support gradient_checkpointing_enable()",
                hard=True,
            )
        ]


@register
class SelectiveCheckpointing(Rule):
    id = "memory.selective-checkpointing"
    title = "selective activation checkpointing: priced when asked, run outside the Trainer"
    topic = "memory"
    sources = [S.SELECTIVE_AC_PAPER, S.TORCHTITAN_AC, S.TORCH_SAC]
    rationale = (
        "Selective checkpointing keeps what is expensive to recompute (attention, every other matmul's "
        "output) or checkpoints only every second block: more memory than full checkpointing, less "
        "recomputation. The HF Trainer checkpoints whole blocks only, so the planner never picks it; "
        "estimate prices it for torchtitan, torchtune or a loop with create_selective_checkpoint_contexts."
    )

    def refuse(self, facts: Facts, plan: Plan) -> Effect | None:
        if Checkpointing.of(plan.checkpointing).selective and not plan.gradient_checkpointing:
            return self.forbid(
                Setting.CHECKPOINTING,
                plan.checkpointing,
                "selective checkpointing is a kind of activation checkpointing: it needs --gradient-checkpointing",
                hard=True,
            )
        return None

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        if not (plan.gradient_checkpointing and Checkpointing.of(plan.checkpointing).selective):
            return []
        return [
            self.warn(
                f"{plan.checkpointing} checkpointing: the HF Trainer cannot run it; use torchtitan "
                "(activation_checkpoint.mode = 'selective'), torchtune (ac_mode) or "
                "torch.utils.checkpoint.create_selective_checkpoint_contexts in your own loop",
                setting=Setting.CHECKPOINTING,
            )
        ]


_IN_RAM_ALREADY = "on the CPU the activations are in RAM already"


@register
class ActivationOffloading(Rule):
    id = "memory.activation-offloading"
    title = "activation offloading to CPU RAM only when the saved activations are what does not fit"
    topic = "memory"
    sources = [S.TRL_ACTIVATION_OFFLOADING, S.TORCHTUNE_ACTIVATION_OFFLOADING, S.MEGATRON_CPU_OFFLOADING]
    rationale = (
        "Saved-tensor hooks copy every tensor the forward saves for backward to pinned CPU RAM on a side "
        "stream and bring it back when the backward needs it, so the GPU keeps about one block's "
        "activations. Beside checkpointing only each block's input crosses PCIe: the forward's copies hide "
        "behind the compute, while the backward waits for each copy back (TRL starts it when autograd asks "
        "for the tensor), 13-15 % of the step on an H100 with Llama-3.1-8B LoRA; without checkpointing every "
        "saved tensor crosses, more than PCIe carries beside the compute of a fast GPU. The numerics do not change. TRL's trainers (activation_offloading=True), torchtune "
        "(enable_activation_offloading) and Megatron (cpu_offloading, pipeline parallel size 1) run it; "
        "the HF Trainer and LitGPT do not."
    )

    def propose(self, facts: Facts) -> list[Effect]:
        if facts.gpu is None:
            return [self.forbid(Setting.ACTIVATION_OFFLOADING, True, _IN_RAM_ALREADY, hard=True)]
        return [
            self.fallback(
                Setting.ACTIVATION_OFFLOADING,
                True,
                "copies the saved activations to CPU RAM and back "
                "over PCIe beside the compute: only when they are what does not fit",
                penalty=Penalty.SLOWER,
            ),
            self.fallback(
                Setting.ACTIVATION_OFFLOADING,
                True,
                "without checkpointing every saved tensor crosses "
                "PCIe, more than it carries beside the compute of a fast GPU",
                penalty=Penalty.SLOWER,
                when={Setting.GRADIENT_CHECKPOINTING: False},
            ),
        ]

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        if not plan.activation_offloading:
            return []
        return [
            self.warn(
                "activation offloading: the HF Trainer has no such option: use TRL's SFTTrainer with "
                "SFTConfig(activation_offloading=True), torchtune (enable_activation_offloading: True) or "
                "trl.models.get_act_offloading_ctx_manager(model) around the forward in your own loop; it "
                "pins host RAM for the activations",
                setting=Setting.ACTIVATION_OFFLOADING,
            )
        ]

    def refuse(self, facts: Facts, plan: Plan) -> Effect | None:
        if not plan.activation_offloading:
            return None
        why = None
        if plan.device != Device.CUDA:
            why = _IN_RAM_ALREADY
        elif plan.pipeline_parallel > 1:
            why = (
                "Megatron offloads activations only at pipeline parallel size 1, and TRL and torchtune run no pipeline"
            )
        elif plan.framework == Framework.LITGPT:
            why = "LitGPT has no activation offloading"
        return self.forbid(Setting.ACTIVATION_OFFLOADING, True, why, hard=True) if why else None
