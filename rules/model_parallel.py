"""Model parallelism: tensor and pipeline parallel (and the interleaved schedule) only when sharded data parallel
does not fit."""

from __future__ import annotations

from advisor.core.vocabulary import Method, Parallelism, Penalty
from advisor.core.dimensions import Setting
from rules import sources as S
from rules.base import Effect, Rule, register
from rules.facts import Facts, Plan


@register
class ModelParallelLastResort(Rule):
    id = "parallelism.model-parallel-when-data-parallel-cannot"
    title = "tensor parallel inside an NVLink island, pipeline parallel across nodes, only when sharded data parallel does not fit"
    topic = "parallelism"
    sources = [
        S.MEGATRON_SCALING,
        S.HF_MANY,
        S.MEGATRON_LM,
        S.ACCELERATE_ND_PARALLEL,
        S.HF_TENSOR_PARALLEL,
        S.HF_TP_CODE,
        S.FSDP_QLORA,
        S.MEGATRON_INTERLEAVED,
    ]
    rationale = (
        "Megatron-LM's takeaways: use tensor parallelism up to the GPUs of a node (its 4 all-reduces per "
        "layer need NVLink), pipeline parallelism across nodes (its bubble costs (p − 1)/m of the step), "
        "and data parallelism for the rest; the HF guide: try sharded data parallel first and reach "
        "for TP/PP when the model does not fit. Hugging Face's Trainer runs TP through accelerate 1.10 and "
        "later (TrainingArguments.parallelism_config = ParallelismConfig(tp_size=t), alone or beside FSDP2, "
        "not beside DDP) for models whose config has a base_model_tp_plan; PP needs Megatron-LM, "
        "DeepSpeed's pipeline engine or torch.distributed.pipelining. None of these splits bitsandbytes' "
        "4-bit layers (transformers' TP shards only torchao and fine-grained fp8 weights; Megatron-LM has "
        "no QLoRA): a QLoRA base is sharded with FSDP (Answer.AI's FSDP + QLoRA)."
    )

    def propose(self, facts: Facts) -> list[Effect]:
        hw = facts.hardware
        effects: list[Effect] = []
        per_node = len(hw.gpus)
        for t in (2, 4, 8):
            if hw.num_gpus <= 1:
                effects.append(
                    self.forbid(Setting.TENSOR_PARALLEL, t, "a single device: nothing to split a layer over", hard=True)
                )
            elif t > per_node:
                effects.append(
                    self.forbid(
                        Setting.TENSOR_PARALLEL,
                        t,
                        f"only {per_node} GPUs per node: tensor parallel stays inside a node",
                        hard=True,
                    )
                )
            elif t > hw.nvlink_domain:
                effects.append(
                    self.forbid(
                        Setting.TENSOR_PARALLEL,
                        t,
                        f"NVLink joins at most {hw.nvlink_domain} of "
                        "the GPUs: tensor parallel all-reduces activations "
                        "4 times per layer",
                    )
                )
            else:
                effects.append(
                    self.fallback(
                        Setting.TENSOR_PARALLEL,
                        t,
                        "splits every layer, with 4 all-reduces per "
                        "layer: only when sharded data parallel does "
                        "not fit",
                        penalty=Penalty.RISKY,
                    )
                )
        if hw.nodes > 1:
            effects.append(
                self.fallback(
                    Setting.PIPELINE_PARALLEL,
                    hw.nodes,
                    f"{hw.nodes} stages across the nodes: a (p − 1)/m bubble; only when sharded "
                    "data parallel does not fit",
                    penalty=Penalty.RISKY,
                )
            )
        return effects

    def refuse(self, facts: Facts, plan: Plan) -> Effect | None:
        mp, gpus, per_node = plan.model_parallel_size, facts.hardware.num_gpus, max(len(facts.hardware.gpus), 1)
        if mp > 1 and Method.of(plan.method).spec.quantized_base:
            setting, value = (
                (Setting.TENSOR_PARALLEL, plan.tensor_parallel)
                if plan.tensor_parallel > 1
                else (Setting.PIPELINE_PARALLEL, plan.pipeline_parallel)
            )
            return self.forbid(
                setting,
                value,
                "bitsandbytes' 4-bit layers do not split over tensor or pipeline "
                "parallel ranks (transformers' TP shards only torchao and fp8 weights; Megatron-LM has "
                "no QLoRA): shard a QLoRA base with FSDP FULL_SHARD",
                hard=True,
            )
        if mp > 1 and (gpus < mp or gpus % mp):  # names the split the plan asks for (pipeline alone: that one)
            setting = Setting.TENSOR_PARALLEL if plan.tensor_parallel > 1 else Setting.PIPELINE_PARALLEL
            return self.forbid(
                setting,
                getattr(plan, setting),
                f"tensor parallel {plan.tensor_parallel} x pipeline parallel {plan.pipeline_parallel} "
                f"needs a multiple of {mp} GPUs, the hardware has {gpus}",
                hard=True,
            )
        if plan.tensor_parallel > per_node:
            return self.forbid(
                Setting.TENSOR_PARALLEL,
                plan.tensor_parallel,
                f"a node has {len(facts.hardware.gpus)} GPUs (tensor parallel stays inside a node)",
                hard=True,
            )
        return None

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        if plan.pipeline_parallel > 1:
            interleave = plan.virtual_pipeline == 1 and equal_chunks(facts, plan.pipeline_parallel, 2)
            return [
                self.warn(
                    f"tensor parallel {plan.tensor_parallel} x pipeline parallel {plan.pipeline_parallel}: "
                    "the HF Trainer and accelerate do not run pipeline parallelism; use Megatron-LM, "
                    "DeepSpeed's pipeline engine or torch.distributed.pipelining"
                    + (
                        "; Megatron-LM's and torch.distributed.pipelining's interleaved schedule cuts the "
                        "bubble by its chunks a stage (estimate --virtual-pipeline 2 prices it)"
                        if interleave
                        else ""
                    )
                )
            ]
        if plan.tensor_parallel > 1:
            ddp = Parallelism.of(plan.parallelism).replicated and plan.data_parallel_size > 1
            return [
                self.warn(
                    f"tensor parallel {plan.tensor_parallel}: the HF Trainer runs it through accelerate 1.10 "
                    f"or later (TrainingArguments.parallelism_config = ParallelismConfig(tp_size="
                    f"{plan.tensor_parallel})) for models whose config has a base_model_tp_plan"
                    + (
                        f", but not beside DDP: shard the {plan.data_parallel_size} replicas with FSDP2 "
                        "(dp_shard_size) or run Megatron-LM"
                        if ddp
                        else "; else Megatron-LM or torch.distributed.tensor.parallel"
                    )
                )
            ]
        return []


def equal_chunks(facts: Facts, stages: int, chunks: int) -> bool:
    """Whether the model's layers split into ``stages`` pipeline stages of ``chunks`` equal chunks each (Megatron-LM
    gives every virtual stage the same number of layers)."""
    return facts.model.num_layers % (stages * chunks) == 0


@register
class VirtualPipeline(Rule):
    id = "parallelism.interleaved-pipeline"
    title = "the interleaved 1F1B schedule: v model chunks a pipeline stage, priced when asked"
    topic = "parallelism"
    sources = [S.MEGATRON_INTERLEAVED, S.MEGATRON_SCHEDULES, S.SELECTIVE_AC_PAPER, S.TORCH_PIPELINING]
    rationale = (
        "1F1B leaves each stage idle for (p − 1) stage times of every step. The interleaved schedule gives "
        "each stage v non-adjacent chunks of L/(p·v) layers, so the bubble shrinks to (p − 1)/v stage "
        "times, for v times the stage-to-stage traffic and a first stage that holds (1 + (p − 1)/(p·v)) "
        "micro-batches' activations instead of one. Megatron-LM and NeMo run it "
        "(virtual_pipeline_model_parallel_size), as torch.distributed.pipelining's ScheduleInterleaved1F1B "
        "(torchtitan) does; the Trainer runs no pipeline. advisor prices it when asked."
    )

    def refuse(self, facts: Facts, plan: Plan) -> Effect | None:
        v, pp = plan.virtual_pipeline, plan.pipeline_parallel
        if v > 1 and pp <= 1:
            return self.forbid(
                Setting.VIRTUAL_PIPELINE,
                v,
                "interleaving splits each pipeline stage into chunks: it needs --pipeline-parallel 2 or more",
                hard=True,
            )
        if v > 1 and not equal_chunks(facts, pp, v):
            return self.forbid(
                Setting.VIRTUAL_PIPELINE,
                v,
                f"{facts.model.num_layers} layers do not split into {pp} stages of {v} equal chunks",
                hard=True,
            )
        return None

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        if plan.virtual_pipeline <= 1:
            return []
        return [
            self.warn(
                f"interleaved pipeline, {plan.virtual_pipeline} chunks a stage: Megatron-LM / NeMo "
                "(virtual_pipeline_model_parallel_size) or torch.distributed.pipelining's "
                "ScheduleInterleaved1F1B run it, not the HF Trainer",
                setting=Setting.VIRTUAL_PIPELINE,
            )
        ]


@register
class AsyncTensorParallel(Rule):
    id = "parallelism.async-tensor-parallel"
    title = "asynchronous tensor parallel (torchtitan): its collectives beside its matmuls, under torch.compile"
    topic = "parallelism"
    sources = [S.TORCHTITAN_ASYNC_TP, S.ASYNC_TP_DECOMPOSITION]
    rationale = (
        "Tensor parallel's all-gathers and reduce-scatters sit between the matmuls that need them. torchtitan's "
        "enable_async_tensor_parallel decomposes each into peer-to-peer steps over symmetric memory that run beside "
        "the partial matmuls (Inductor's micro-pipelined tensor parallel, so it needs torch.compile): its async-TP "
        "page measures 1.09x (bf16) and 1.16x (float8) the tokens/s of Llama 3 70B on 256 H100s at TP 8. advisor "
        "prices it when asked (estimate --async-tp: a collective waits only for its first step's share and for what "
        "exceeds the compute) and never chooses it, as no file it emits runs tensor parallel."
    )

    def refuse(self, facts: Facts, plan: Plan) -> Effect | None:
        if not plan.async_tp:
            return None
        if plan.tensor_parallel <= 1:
            why = "asynchronous tensor parallel overlaps tensor parallel's collectives: it needs --tensor-parallel 2+"
            return self.forbid(Setting.ASYNC_TP, True, why, hard=True)
        if not plan.torch_compile:
            why = "torchtitan runs asynchronous tensor parallel only under torch.compile ('Async TP requires torch.compile')"
            return self.forbid(Setting.ASYNC_TP, True, why, hard=True)
        return None

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        if not plan.async_tp or plan.tensor_parallel <= 1:
            return []
        return [
            self.warn(
                "asynchronous tensor parallel is priced, not emitted: torchtitan runs it ([parallelism] "
                "enable_async_tensor_parallel = true with [compile] enable = true)",
                setting=Setting.ASYNC_TP,
            )
        ]
