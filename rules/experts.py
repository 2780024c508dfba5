"""Mixture of experts: expert parallelism, where a framework beyond the Trainer runs it and it pays."""

from __future__ import annotations

from probes.model import ModelProfile
from advisor.core.vocabulary import Method, Offload, Penalty
from advisor.core.dimensions import Setting
from rules import sources as S
from rules.base import Effect, Rule, register
from rules.facts import Facts, Plan


def expert_parallel_degrees(model: ModelProfile, gpus: int) -> list[int]:
    """The expert-parallel degrees worth searching: powers of two above 1 that divide the routed experts and the
    GPUs (an expert-parallel group sits inside the data-parallel group; DeepSpeed-MoE's ``ep_size`` and
    Megatron-Core's ``--expert-model-parallel-size`` both need the experts to split evenly)."""
    if not model.num_experts or gpus <= 1:
        return []
    return [e for e in (2, 4, 8, 16, 32, 64) if e <= gpus and not gpus % e and not model.num_experts % e]


@register
class ExpertParallel(Rule):
    id = "parallelism.expert-parallel"
    title = "expert parallelism for a mixture of experts: 1/e of the experts per GPU, tokens exchanged all-to-all"
    topic = "parallelism"
    sources = [S.GSHARD, S.DEEPSPEED_MOE, S.MEGATRON_MOE]
    rationale = (
        "A mixture of experts holds every expert but runs k per token. Expert parallelism puts 1/e of each "
        "block's routed experts on each of e GPUs of the data-parallel group and moves the tokens instead: "
        "an all-to-all dispatch and an all-to-all combine of the b·s·k·h routed activations per MoE block "
        "in the forward, two more in the backward (GShard sec. 2.2). The replicated expert weights, "
        "gradients and unsharded states shrink e-fold and the experts' gradients sync only among the n/e "
        "ranks holding the same experts; ZeRO-3 / FSDP FULL_SHARD would instead all-gather every expert's "
        "weights every layer. It helps when the experts do not fit replicated or that all-gather costs "
        "more than the all-to-all, best inside an NVLink node. The HF Trainer and accelerate have no expert "
        "parallelism: it needs DeepSpeed-MoE (ep_size), Megatron-Core (--expert-model-parallel-size) or "
        "torchtitan."
    )

    def propose(self, facts: Facts) -> list[Effect]:
        degrees = expert_parallel_degrees(facts.model, facts.hardware.num_gpus)
        why = (
            "splits the routed experts over {e} GPUs, 4 all-to-all exchanges per MoE block and micro-batch; needs "
            "DeepSpeed-MoE or Megatron-Core (the Trainer has no expert parallelism): only when it fits where "
            "replicated experts do not, or is faster"
        )
        return [self.fallback(Setting.EXPERT_PARALLEL, e, why.format(e=e), penalty=Penalty.RISKY) for e in degrees]

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        if plan.expert_parallel <= 1:
            return []
        m = facts.model
        per_gpu = m.num_experts // plan.expert_parallel
        return [
            self.warn(
                f"expert parallel {plan.expert_parallel}: each GPU holds {per_gpu} of the {m.num_experts} "
                f"routed experts of each of the {m.moe_layers} MoE blocks and exchanges tokens all-to-all; "
                "the HF Trainer and accelerate cannot run it: use DeepSpeed-MoE (ep_size "
                f"{plan.expert_parallel}) or Megatron-Core (--expert-model-parallel-size "
                f"{plan.expert_parallel}); the estimate assumes balanced routing",
                setting=Setting.EXPERT_PARALLEL,
            )
        ]

    def refuse(self, facts: Facts, plan: Plan) -> Effect | None:
        e = plan.expert_parallel
        if e <= 1:
            return None
        m = facts.model
        why = None
        if not m.num_experts:
            why = f"{m.model_type} is not a mixture of experts: there are no experts to split"
        elif m.num_experts % e:
            why = f"{m.num_experts} routed experts do not split evenly over {e} GPUs"
        elif plan.data_parallel_size % e:
            why = (
                f"the expert-parallel group sits inside the data-parallel group of {plan.data_parallel_size} "
                f"GPU(s): {e} does not divide it"
            )
        elif Method.of(plan.method).spec.adapters:
            why = "adapters (PEFT) run under the Trainer, which has no expert parallelism"
        elif plan.offload != Offload.NONE:
            why = "advisor does not price offload beside expert parallelism"
        return self.forbid(Setting.EXPERT_PARALLEL, e, why, hard=True) if why else None
