"""FSDP's two implementations: FSDP1 (``FullyShardedDataParallel``) and FSDP2 (``fully_shard``); sharding the
weights over hundreds of ranks."""

from __future__ import annotations

from advisor.core.vocabulary import Method, Parallelism
from advisor.core.dimensions import Setting
from rules import sources as S
from rules.base import Effect, Rule, register
from rules.facts import Facts, Plan


@register
class Fsdp2(Rule):
    id = "parallelism.fsdp2"
    title = "FSDP2 (fully_shard) rather than FSDP1: lower, deterministic reserved memory"
    topic = "parallelism"
    sources = [S.TORCHTITAN_FSDP2, S.ACCELERATE_FSDP1_VS_FSDP2]
    rationale = (
        "FSDP1 (FullyShardedDataParallel) flattens each wrapped module into one FlatParameter and hands its "
        "all-gathered parameters to the compute stream with recordStream, which keeps every freed block from "
        "reuse until that stream passes it: the caching allocator reserves well beyond the live tensors. "
        "FSDP2 (fully_shard) shards each parameter as a DTensor and frees the gathered buffers "
        "deterministically, without recordStream: 'lower and deterministic GPU memory', 7 % lower peak "
        "memory than FSDP1 on Llama-7B on 8 H100s. advisor plans FSDP2 (--emit writes fsdp_config version "
        "2 on transformers 5) and prices FSDP1 when asked (--fsdp-version 1) with the uncapped reserve; the "
        "Trainer runs HYBRID_SHARD on FSDP1."
    )

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        parallelism = Parallelism.of(plan.parallelism)
        if (
            not parallelism.fsdp
            or plan.runs_fsdp2
            or parallelism.spec.replicated_across_nodes
            or Method.of(plan.method).spec.quantized_base
        ):  # QLoRA runs FSDP1 on purpose: QloraOnFsdp1
            return []
        return [
            self.warn(
                "FSDP1 (FullyShardedDataParallel): its all-gathers' recordStream keeps freed blocks "
                "cached, priced as an uncapped allocator reserve; FSDP2 (fsdp_config version 2 on "
                "transformers 5, --fsdp-version 2) holds less",
                setting=Setting.FSDP_VERSION,
            )
        ]


@register
class QloraOnFsdp1(Rule):
    id = "method.qlora-fsdp1"
    title = "QLoRA sharded with FSDP1, the measured FSDP + QLoRA recipe"
    topic = "method"
    sources = [S.FSDP_QLORA, S.ALIGNMENT_HANDBOOK_FSDP_QLORA, S.BNB_FSDP_QLORA]
    rationale = (
        "FSDP + QLoRA was built and measured on FSDP1 (FullyShardedDataParallel): Answer.AI's fsdp_qlora "
        "(Llama-2 70B on two 24 GB GPUs), the alignment handbook's fsdp_qlora.yaml (no fsdp_version: 1, "
        "use_orig_params false, RAM-efficient loading), with bitsandbytes' 4-bit weights stored in the "
        "compute dtype so that FSDP can shard them. FSDP2 (fully_shard) over Params4bit DTensors has no such "
        "measured recipe and open correctness reports, so advisor plans, prices (FSDP1's uncapped allocator "
        "reserve) and emits a QLoRA plan's FSDP as FSDP1 (fsdp_version 1, fsdp_use_orig_params false)."
    )

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        if not (Parallelism.of(plan.parallelism).fsdp and Method.of(plan.method).spec.quantized_base):
            return []
        return [
            self.warn(
                "QLoRA shards with FSDP1 (fsdp_version 1, use_orig_params false), as Answer.AI's fsdp_qlora "
                "and the alignment handbook's fsdp_qlora.yaml measured it; FSDP2 over 4-bit weights is "
                "unproven",
                setting=Setting.FSDP_VERSION,
            )
        ]


#: Ranks of a weight-sharding group (ZeRO-3, FSDP FULL / HYBRID_SHARD's shards) beyond which the step time is least
#: sure: every parameter gather then runs one ring over them, NCCL's per-call latency passes a millisecond (256 ranks
#: over 32 nodes: 8.4 µs + 255 steps of 3.4-9.6 µs, ``advisor.engine.collectives.ring_latency_seconds``), paid per
#: fetched layer. The published ZeRO-3 runs there (the Megatron-LM paper's, 384-2240 A100s) sit 1.4-2.7x from their
#: price, the FSDP runs on up to 128 GPUs within 1.25x (``benchmarks/results/published.md``); the step-time bands
#: keep them apart (``advisor.engine.bands.sharding``).
WIDE_SHARDING_RANKS = 256


@register
class WideWeightSharding(Rule):
    id = "parallelism.wide-weight-sharding"
    title = "weights sharded over hundreds of GPUs: the least sure step time"
    topic = "parallelism"
    sources = [S.MEGATRON_ZERO3, S.MEGATRON_SCALING]
    rationale = (
        "ZeRO-3 and FSDP's FULL_SHARD gather every layer's parameters over the whole sharding group, forward and "
        "backward, and reduce-scatter its gradients there: the bytes a GPU moves do not shrink as GPUs are added, "
        "while its share of the compute does, and each call's ring grows with the ranks. The Megatron-LM paper "
        "measured ZeRO-3 without model parallelism on 384-2240 A100s: per-GPU throughput fell as GPUs were added "
        "at a fixed batch, where tensor and pipeline parallelism with a smaller data-parallel group held it. Those "
        "runs took 1.4-2.7x the step time advisor prices them at, and the step-time band has too few of them to "
        "say so itself."
    )

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        if Parallelism.of(plan.parallelism).stage < 3 or plan.shard_group_size <= WIDE_SHARDING_RANKS:
            return []
        return [
            self.warn(
                f"weights sharded over {plan.shard_group_size} ranks: published ZeRO-3 runs on 384-2240 GPUs took "
                "1.4-2.7x the step time priced here; validate it, or shard over fewer ranks (HYBRID_SHARD, or "
                "tensor / pipeline parallel with a smaller data-parallel group)",
                setting=Setting.PARALLELISM,
            )
        ]
