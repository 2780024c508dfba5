"""What LoRA / QLoRA adapters train and leave frozen, in words (the method rules' card lines): close to full
fine-tuning on a dense model; on a mixture of experts, whether the routed experts train."""

from __future__ import annotations

from probes.adapters import adapts_experts
from probes.model import ModelProfile
from advisor.core.vocabulary import LoraTargets
from rules.facts import Plan


def experts_note(model: ModelProfile, plan: Plan) -> str:
    """What the targets do to a mixture of experts' routed experts, for the lora_targets line ('' on a dense model)."""
    if not model.num_experts:
        return ""
    if adapts_experts(model, plan.lora_targets):
        return (
            "; on this mixture of experts that includes the routed experts, whose 3-D parameters are not linear "
            "layers: lora_config.json names them in target_parameters (PEFT >= 0.17; gate_up_proj at rank 2r, "
            "as PEFT's own conversion of all-linear for transformers 5 sets it)"
        )
    return "; the routed experts' 3-D parameters stay frozen (all-linear would reach them through target_parameters)"


def adapters_warning(model: ModelProfile, method: str, trained: int, targets: str = LoraTargets.ALL_LINEAR) -> str:
    """What adapters train and leave frozen, in one line: close to full fine-tuning on a dense model; on a mixture of
    experts, whether the routed experts train (all-linear: PEFT's ``target_parameters`` on their 3-D parameters, at a
    cost the estimate includes: a merged 16-bit copy of a block's experts per step, ``advisor.engine.experts``) or
    plainly stay frozen (attention targets)."""
    if not model.num_experts:
        return (
            f"{method} trains {trained / 1e6:,.1f}M adapter parameters and leaves the "
            f"{model.num_parameters / 1e9:.1f}B base weights frozen: close to full fine-tuning on instruction "
            "and task tuning, weaker at absorbing new knowledge (continued pre-training); merge the adapters "
            "for inference or load them with peft"
        )
    share = model.routed_parameters / max(model.num_parameters, 1) * 100
    experts = f"the {model.num_experts} routed experts of every MoE block ({model.routed_parameters / 1e9:.1f}B parameters, {share:.0f} % of the model)"  # noqa: E501
    if adapts_experts(model, targets):
        return (
            f"{method} trains {trained / 1e6:,.1f}M adapter parameters, on attention, the routers and {experts}: "
            "PEFT's target_parameters give every expert its own rank-r pair, and each step merges W + B x A into a "
            "16-bit copy of a block's experts (held to the backward without checkpointing): priced in the "
            "memory and the step time; --lora-targets attention trains attention only, faster, and leaves the "
            "experts frozen"
        )
    return (
        f"{method} trains {trained / 1e6:,.1f}M adapter parameters on attention only: {experts} stay frozen; "
        "expect less than full fine-tuning's adaptation. --lora-targets all-linear adapts them too (PEFT's "
        "target_parameters)"
    )
