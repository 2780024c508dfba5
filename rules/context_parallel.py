"""Context parallelism: one sample's sequence split over several GPUs for long context (ring attention)."""

from __future__ import annotations

from advisor.core.dimensions import Setting
from advisor.core.kernels import Attention
from advisor.core.vocabulary import Method, Offload, Penalty
from rules import sources as S
from rules.base import Effect, Rule, register
from rules.facts import Facts, Plan

#: Tokens a context-parallel rank keeps at least (8k): below, a ring hop's key / value block is too small for the
#: attention compute beside it to hide its exchange (ring attention's premise, Liu et al. 2023 sec. 3). An
#: assumption, not a fit: torchtitan's and accelerate's context-parallel examples split 32k-1M-token sequences.
MIN_TOKENS_PER_RANK = 8192


@register
class ContextParallelForLongContext(Rule):
    id = "parallelism.context-parallel-for-long-context"
    title = "split each sequence over the GPUs of a node (context parallel) only when its activations do not fit"
    topic = "parallelism"
    sources = [S.RING_ATTENTION, S.TORCH_CONTEXT_PARALLEL, S.ACCELERATE_CONTEXT_PARALLEL, S.ACCELERATE_ND_PARALLEL]
    rationale = (
        "Activations grow with the sequence: at 128k tokens one sample's no longer fits a GPU whatever the "
        "sharding of the weights. Context parallelism splits each sequence over c GPUs: every rank keeps its "
        "s/c tokens' activations and computes its queries against every key, while ring attention passes "
        "the keys and values around the ring, a block at a time, behind the attention compute (Liu et al. "
        "2023). Unlike tensor parallel it leaves the matmuls whole and exchanges only keys and values (a "
        "fraction of the hidden state under grouped-query attention), so it is the lighter split for long "
        "context. torch's context_parallel (torchtitan) and accelerate's ParallelismConfig(cp_size) run it "
        "with FSDP2 over the data-parallel x context-parallel ranks and SDPA's flash or efficient kernels, "
        "splitting the sequence in 2c chunks for load balance. A fallback: used only when no plan without "
        "it fits at a lower penalty."
    )

    def propose(self, facts: Facts) -> list[Effect]:
        hw, seq = facts.hardware, facts.workload.seq_len
        per_node = max(len(hw.gpus), 1)
        effects = []
        for c in (2, 4, 8):
            if hw.num_gpus <= 1:
                why = "a single device: nothing to split a sequence over"
            elif c > per_node:
                why = f"only {per_node} GPUs per node: the ring of context parallel {c} stays inside a node"
            elif seq % (2 * c):
                why = f"--seq-len {seq} does not split into {2 * c} equal chunks (context_parallel's load balance)"
            elif seq // c < MIN_TOKENS_PER_RANK:
                effects.append(
                    self.forbid(
                        Setting.CONTEXT_PARALLEL,
                        c,
                        f"{seq // c} tokens a rank: context parallel "
                        f"is for long context (at least {MIN_TOKENS_PER_RANK} tokens a rank, so "
                        "the ring's exchange hides behind the attention)",
                    )
                )
                continue
            else:
                effects.append(
                    self.fallback(
                        Setting.CONTEXT_PARALLEL,
                        c,
                        f"splits each sequence over {c} GPUs, ring "
                        "attention exchanging keys and values every layer: only when a "
                        "sequence's activations do not fit",
                        penalty=Penalty.MUCH_SLOWER,
                    )
                )
                continue
            effects.append(self.forbid(Setting.CONTEXT_PARALLEL, c, why, hard=True))
        return effects

    def refuse(self, facts: Facts, plan: Plan) -> Effect | None:
        c = plan.context_parallel
        if c <= 1:
            return None
        per_node = max(len(facts.hardware.gpus), 1)
        why = None
        if not plan.runs_fsdp2:
            why = "context parallel runs with FSDP2 over the data-parallel x context-parallel ranks: use fsdp-* (FSDP2)"
        elif Method.of(plan.method).spec.quantized_base:
            why = "QLoRA's 4-bit base shards with FSDP1, which context parallel does not run with"
        elif Offload.of(plan.offload) != Offload.NONE:
            why = "context parallel is planned without CPU offload"
        elif plan.expert_parallel > 1:
            why = "context parallel is planned without expert parallel"
        elif c * max(plan.tensor_parallel, 1) > per_node:
            why = f"context parallel {c} x tensor parallel {plan.tensor_parallel} spans more than a node's {per_node} GPUs"
        if why is not None:
            return self.forbid(Setting.CONTEXT_PARALLEL, c, why, hard=True)
        if plan.attention != Attention.SDPA:
            return self.forbid(
                Setting.ATTENTION,
                plan.attention,
                "context parallel's ring attention runs SDPA's kernels (torch's context_parallel): --attention sdpa",
                hard=True,
            )
        return None
