"""Parallelism: one device, DDP (never DP), ZeRO/FSDP sharding only when it pays."""

from __future__ import annotations

from advisor.core.vocabulary import Method, Offload, Parallelism, Penalty
from advisor.core.dimensions import Setting
from advisor.core.units import GIB
from rules import sources as S
from rules.base import Effect, Rule, register
from rules.facts import Facts, Plan

SMALL_MODEL = 200_000_000  #: below: plain data parallel (seed lecture review)
LARGE_MODEL = 500_000_000  #: above: consider sharding (Lightning: "roughly 500M+ parameters")


@register
class SingleDevice(Rule):
    id = "parallelism.single-device"
    title = "one device: no distributed wrapper"
    topic = "parallelism"
    sources = [S.HF_SCALE, S.HF_DEEPSPEED]
    rationale = ("With one GPU (or the CPU) there is nothing to distribute; DeepSpeed on a single GPU that fits "
                 "the model only slows things down.")

    def propose(self, facts: Facts) -> list[Effect]:
        if facts.hardware.num_gpus > 1:
            return []
        why = "a single device: nothing to distribute"
        offloading = "on one GPU only to offload (ZeRO-Offload / FSDP CPUOffload): see the offload setting"
        return [self.fallback(Setting.PARALLELISM, v, offloading, penalty=Penalty.NONE)
                if self._offloads_alone(facts, v) else self.forbid(Setting.PARALLELISM, v, why)
                for v in Parallelism if v != Parallelism.NONE]

    @staticmethod
    def _offloads_alone(facts: Facts, parallelism: Parallelism) -> bool:
        """A sharding strategy that runs on one GPU to offload to the CPU (ZeRO-Offload, Ren et al. 2021 sec. 4;
        FSDP's CPUOffload): not on the CPU, and only those that can offload (ZeRO-2 / ZeRO-3 / FULL_SHARD)."""
        return (facts.hardware.num_gpus == 1 and parallelism.stage >= 2 and len(parallelism.spec.offloads) > 1
                and not parallelism.spec.replicated_across_nodes)

    def refuse(self, facts: Facts, plan: Plan) -> Effect | None:
        replicas = plan.data_parallel_size > 1
        if plan.parallelism == Parallelism.NONE and replicas:
            return self.forbid(Setting.PARALLELISM, plan.parallelism,
                               f"{plan.data_parallel_size} model replicas need a data-parallel strategy (ddp)", hard=True)
        if plan.parallelism != Parallelism.NONE and not replicas:
            if plan.offload != Offload.NONE and self._offloads_alone(facts, Parallelism.of(plan.parallelism)):
                return None
            return self.forbid(Setting.PARALLELISM, plan.parallelism,
                               "needs several model replicas (GPUs / model-parallel size, or processes on the CPU), "
                               "or on one GPU an offload (ZeRO-2 / ZeRO-3 / fsdp-full-shard)", hard=True)
        return None


@register
class DdpNotDp(Rule):
    id = "parallelism.ddp-not-dp"
    title = "DistributedDataParallel, never DataParallel"
    topic = "parallelism"
    sources = [S.HF_DP_DDP, S.TORCH_DP]
    rationale = ("DP is one process with Python threads: GPU 0 scatters inputs, gathers outputs and does extra "
                 "work, with 5 data exchanges per batch; DDP is one process per GPU and only all-reduces "
                 "gradients. PyTorch itself recommends DDP.")

    def propose(self, facts: Facts) -> list[Effect]:
        if facts.hardware.num_gpus <= 1:
            return []
        return [self.forbid(Setting.PARALLELISM, Parallelism.DP, "nn.DataParallel: single process, GPU 0 bottleneck, 5 exchanges "
                                                 "per batch; use DDP (torchrun)"),
                self.forbid(Setting.PARALLELISM, Parallelism.NONE, f"leaves {facts.hardware.num_gpus - 1} of "
                                                   f"{facts.hardware.num_gpus} GPUs idle")]


@register
class DataParallelForSmallModels(Rule):
    id = "parallelism.data-parallel-small-models"
    title = "plain data parallel for models under ~200M parameters"
    topic = "parallelism"
    sources = [S.LIGHTNING_MODEL_PARALLEL, S.HF_SCALE]
    rationale = "A model that fits one GPU with a good batch scales by replicating it: DDP syncs once per step."

    def propose(self, facts: Facts) -> list[Effect]:
        if facts.hardware.num_gpus <= 1 or facts.model.num_parameters >= SMALL_MODEL:
            return []
        return [self.prefer(Setting.PARALLELISM, Parallelism.DDP, f"{facts.model.num_parameters / 1e6:.0f}M parameters: "
                                                  "replicate and all-reduce gradients once per step")]


@register
class ShardingOnlyWhenNeeded(Rule):
    id = "parallelism.deepspeed-only-when-needed"
    title = "ZeRO / FSDP only when the model or a small batch does not fit (models up to ~500M)"
    topic = "parallelism"
    sources = [S.HF_DEEPSPEED, S.HF_SCALE, S.ZERO_PAPER]
    rationale = ("The documents' decision tree: if the model fits one GPU with room for a small batch, DeepSpeed "
                 "only slows things down; if it does not, use DeepSpeed ZeRO (or FSDP). ZeRO-3 also gathers "
                 "parameters every layer (~1.5x DDP's traffic).")

    def propose(self, facts: Facts) -> list[Effect]:
        if facts.hardware.num_gpus <= 1 or facts.model.num_parameters > LARGE_MODEL:
            return []
        why = "shards model states at the cost of communication: only when DDP does not fit"
        every_layer = why + " (gathers parameters every layer)"
        return [self.fallback(Setting.PARALLELISM, Parallelism.ZERO_1, why, penalty=Penalty.SLOWER),
                self.fallback(Setting.PARALLELISM, Parallelism.ZERO_2, why, penalty=Penalty.SLOWER),
                self.fallback(Setting.PARALLELISM, Parallelism.FSDP_SHARD_GRAD_OP, why, penalty=Penalty.SLOWER),
                self.fallback(Setting.PARALLELISM, Parallelism.ZERO_3, every_layer, penalty=Penalty.MUCH_SLOWER),
                self.fallback(Setting.PARALLELISM, Parallelism.FSDP_FULL_SHARD, every_layer, penalty=Penalty.MUCH_SLOWER),
                self.fallback(Setting.PARALLELISM, Parallelism.FSDP_HYBRID_SHARD, every_layer, penalty=Penalty.MUCH_SLOWER)]


@register
class ShardLargeModels(Rule):
    id = "parallelism.shard-large-models"
    title = "over ~500M parameters, sharded data parallel competes on equal terms"
    topic = "parallelism"
    sources = [S.LIGHTNING_MODEL_PARALLEL, S.HF_MANY, S.ZERO_PAPER]
    rationale = ("Above roughly 500M parameters the replicated model states (16 B/param with mixed-precision "
                 "Adam) crowd out activations; ZeRO-2 / FSDP SHARD_GRAD_OP shards states and gradients for "
                 "DDP-like traffic.")

    def propose(self, facts: Facts) -> list[Effect]:
        if facts.hardware.num_gpus <= 1 or facts.model.num_parameters <= LARGE_MODEL:
            return []
        why = (f"{facts.model.num_parameters / 1e9:.1f}B parameters: shard optimizer states and gradients at "
               "DDP-like traffic")
        return [self.prefer(Setting.PARALLELISM, [Parallelism.ZERO_2, Parallelism.FSDP_SHARD_GRAD_OP], why)]


@register
class SlowLinksFavourDdp(Rule):
    id = "parallelism.slow-links-favour-ddp"
    title = "without NVLink, ZeRO-3 and tensor parallel are costly"
    topic = "parallelism"
    sources = [S.HF_CONNECTIVITY, S.HF_DP_DDP]
    rationale = ("DDP syncs once per step, so a slow link matters less; ZeRO-3 and tensor parallel exchange data "
                 "every layer and need NVLink-class bandwidth (the HF guide: DDP 23 % slower without NVLink even "
                 "for gpt2).")

    @staticmethod
    def _slow_links(facts: Facts) -> str | None:
        """The node's links in words when no NVLink ring runs through its GPUs (None: one does, or one GPU)."""
        hw = facts.hardware
        if len(hw.gpus) <= 1 or hw.nvlink_ring:
            return None
        if hw.gpu is not None and not hw.gpu.peer_to_peer:
            return "PCIe without peer-to-peer (through host memory)"
        return "bridged pairs, PCIe between them" if hw.nvlink_domain > 1 else "PCIe"

    def propose(self, facts: Facts) -> list[Effect]:
        if self._slow_links(facts) is None:
            return []
        return [self.prefer(Setting.PARALLELISM, Parallelism.DDP, "no NVLink between the GPUs: sync as rarely as possible")]

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        hw, links = facts.hardware, self._slow_links(facts)
        per_layer = Parallelism.of(plan.parallelism).stage >= 3 or plan.tensor_parallel > 1
        effects = []
        if links is not None and per_layer:
            effects.append(self.warn(f"no NVLink ring through the GPUs ({links}): {plan.parallelism}"
                                     + (f" with tensor parallel {plan.tensor_parallel}" if plan.tensor_parallel > 1
                                        else "")
                                     + " exchanges data every layer over the slow links; the estimate counts that "
                                       "traffic for every micro-batch and still ranks this plan first (it fits a "
                                       "larger micro-batch or nothing lighter fits): `advisor validate` measures it"))
        if plan.parallelism in (Parallelism.ZERO_3, Parallelism.FSDP_FULL_SHARD) and hw.nodes > 1:
            effects.append(self.warn(f"{plan.parallelism} across {hw.nodes} nodes gathers parameters over the "
                                     "inter-node network every layer: a fast interconnect (InfiniBand) matters; FSDP "
                                     "HYBRID_SHARD keeps that traffic inside each node"))
        return effects


@register
class NetworkNeedsNodes(Rule):
    id = "parallelism.network-needs-nodes"
    title = "the network between nodes is priced only with several nodes"
    topic = "parallelism"
    sources = [S.HF_CONNECTIVITY, S.HF_MANY]
    rationale = ("Inside one node the GPUs exchange gradients and parameters over NVLink or PCIe; the network "
                 "(InfiniBand, Ethernet, its NICs) carries only what crosses nodes. Network settings given for one "
                 "node change nothing in the plan, which usually means the node count was left out.")

    def propose(self, facts: Facts) -> list[Effect]:
        hw = facts.hardware
        network = (("--interconnect", hw.interconnect), ("--inter-node-gbps", hw.inter_node_gbit_s),
                   ("--nics-per-node", hw.nics_per_node))
        given = [flag for flag, value in network if value is not None]
        if hw.nodes > 1 or not given:
            return []
        one = len(given) == 1
        return [self.warn(f"{', '.join(given)} describe{'s' if one else ''} the network between nodes, and this plan "
                          f"is for one node: {'it changes' if one else 'they change'} nothing "
                          "(several nodes: --nodes N)")]


@register
class OffloadLastResort(Rule):
    id = "parallelism.offload-last-resort"
    title = "CPU offload of ZeRO states only when nothing on the GPUs fits"
    topic = "parallelism"
    sources = [S.HF_DEEPSPEED, S.ZERO_PAPER, S.ZERO_OFFLOAD_PAPER, S.ZERO_INFINITY_PAPER, S.DEEPSPEED_MEMORY]
    rationale = ("ZeRO-Offload moves optimizer states (and with stage 3 the parameters) to CPU RAM, on one GPU too "
                 "(the seeds' decision tree: does not fit one GPU → DeepSpeed with offload): it fits much larger "
                 "models, but every step crosses PCIe and the CPU runs the optimizer, so it is the slowest option "
                 "in RAM; it needs 16-18 B/param of host RAM (DeepSpeed's estimators). ZeRO-Infinity moves them on "
                 "to NVMe when the host's RAM runs out, slower still.")

    def propose(self, facts: Facts) -> list[Effect]:
        if facts.hardware.num_gpus < 1:
            why = "training on the CPU: there is no GPU memory to relieve"
            return [self.forbid(Setting.OFFLOAD, o, why, hard=True) for o in Offload if o != Offload.NONE]
        return [self.fallback(Setting.OFFLOAD, Offload.OPTIMIZER, "optimizer states in CPU RAM: every step crosses PCIe",
                              penalty=Penalty.OFFLOAD_OPTIMIZER),
                self.fallback(Setting.OFFLOAD, Offload.OPTIMIZER_PARAMETERS,
                              "optimizer states and parameters in CPU RAM: the slowest plan in RAM",
                              penalty=Penalty.OFFLOAD_ALL),
                self.fallback(Setting.OFFLOAD, Offload.NVME, "optimizer states and parameters on NVMe (ZeRO-Infinity): "
                              "only when the host's RAM cannot hold them", penalty=Penalty.OFFLOAD_NVME)]

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        hw = facts.hardware
        if plan.offload == Offload.NONE and not plan.activation_offloading:
            return []
        where = "NVMe" if Offload.of(plan.offload).nvme else "CPU RAM"
        if hw.host_memory_assumed:  # a catalog GPU: its typical server's RAM, never unlimited
            return [self.warn(f"offload to {where} checked against {hw.host_memory / GIB:,.0f} GiB of host RAM per "
                              f"node, the catalog's typical server for {hw.gpu.name if hw.gpu else 'this GPU'} "
                              f"({hw.typical_host_source}): pass --host-memory SIZE for yours", setting=Setting.OFFLOAD)]
        if hw.host_memory is not None:
            return []
        return [self.warn(f"offload to {where} planned without knowing the host's RAM: pass --host-memory SIZE "
                          "(e.g. 256GB) to check it", setting=Setting.OFFLOAD)]

    def refuse(self, facts: Facts, plan: Plan) -> Effect | None:
        """Offload pairs only with sharding that supports it (:class:`advisor.core.vocabulary.ParallelismSpec` offloads)."""
        if plan.offload in Parallelism.of(plan.parallelism).spec.offloads:
            return None
        able = [p.value for p in Parallelism if plan.offload in p.spec.offloads]
        return self.forbid(Setting.OFFLOAD, plan.offload, f"needs sharding that offloads it: {', '.join(able)}",
                           hard=True)


@register
class FsdpOrDeepSpeed(Rule):
    id = "parallelism.fsdp-or-deepspeed"
    title = "sharding with FSDP (built into PyTorch) or DeepSpeed ZeRO (a package)"
    topic = "parallelism"
    sources = [S.ACCELERATE_FSDP_DEEPSPEED, S.TORCH_FSDP, S.HF_DEEPSPEED]
    rationale = ("FSDP's sharding strategies are ZeRO's counterparts (SHARD_GRAD_OP ~ ZeRO-2, FULL_SHARD ~ "
                 "ZeRO-3, HYBRID_SHARD: FULL_SHARD inside a node, replicated across nodes) and ship with PyTorch; "
                 "DeepSpeed needs its package and adds ZeRO-1 and finer offload (optimizer only). HYBRID_SHARD "
                 "exists for several nodes: on one it is FULL_SHARD.")

    def propose(self, facts: Facts) -> list[Effect]:
        hw = facts.hardware
        if hw.num_gpus <= 1:
            return []
        effects = []
        if hw.nodes <= 1:
            effects.append(self.forbid(Setting.PARALLELISM, Parallelism.FSDP_HYBRID_SHARD,
                                       "one node: HYBRID_SHARD is FULL_SHARD (it replicates across nodes)"))
        deepspeed = facts.packages.get("deepspeed")
        if deepspeed is False:
            effects.append(self.prefer(Setting.PARALLELISM, [p for p in Parallelism if p.fsdp],
                                       "DeepSpeed is not installed here; FSDP is part of PyTorch"))
        elif deepspeed is True:
            effects.append(self.prefer(Setting.PARALLELISM, [p for p in Parallelism if p.deepspeed],
                                       "DeepSpeed is installed: ZeRO with its optimizer-only offload"))
        return effects


@register
class ModelParallelLastResort(Rule):
    id = "parallelism.model-parallel-when-data-parallel-cannot"
    title = "tensor parallel inside an NVLink island, pipeline parallel across nodes, only when sharded data parallel does not fit"
    topic = "parallelism"
    sources = [S.MEGATRON_SCALING, S.HF_MANY, S.MEGATRON_LM, S.ACCELERATE_ND_PARALLEL, S.HF_TENSOR_PARALLEL, S.HF_TP_CODE,
               S.FSDP_QLORA, S.MEGATRON_INTERLEAVED]
    rationale = ("Megatron-LM's takeaways: use tensor parallelism up to the GPUs of a node (its 4 all-reduces per "
                 "layer need NVLink), pipeline parallelism across nodes (its bubble costs (p − 1)/m of the step), "
                 "and data parallelism for the rest; the HF guide: try sharded data parallel first and reach "
                 "for TP/PP when the model does not fit. Hugging Face's Trainer runs TP through accelerate 1.10 and "
                 "later (TrainingArguments.parallelism_config = ParallelismConfig(tp_size=t), alone or beside FSDP2, "
                 "not beside DDP) for models whose config has a base_model_tp_plan; PP needs Megatron-LM, "
                 "DeepSpeed's pipeline engine or torch.distributed.pipelining. None of these splits bitsandbytes' "
                 "4-bit layers (transformers' TP shards only torchao and fine-grained fp8 weights; Megatron-LM has "
                 "no QLoRA): a QLoRA base is sharded with FSDP (Answer.AI's FSDP + QLoRA).")

    def propose(self, facts: Facts) -> list[Effect]:
        hw = facts.hardware
        effects: list[Effect] = []
        per_node = len(hw.gpus)
        for t in (2, 4, 8):
            if hw.num_gpus <= 1:
                effects.append(self.forbid(Setting.TENSOR_PARALLEL, t, "a single device: nothing to split a layer over",
                                           hard=True))
            elif t > per_node:
                effects.append(self.forbid(Setting.TENSOR_PARALLEL, t, f"only {per_node} GPUs per node: tensor parallel "
                                                                 "stays inside a node", hard=True))
            elif t > hw.nvlink_domain:
                effects.append(self.forbid(Setting.TENSOR_PARALLEL, t, f"NVLink joins at most {hw.nvlink_domain} of "
                                                                 "the GPUs: tensor parallel all-reduces activations "
                                                                 "4 times per layer"))
            else:
                effects.append(self.fallback(Setting.TENSOR_PARALLEL, t, "splits every layer, with 4 all-reduces per "
                                                                   "layer: only when sharded data parallel does "
                                                                   "not fit", penalty=Penalty.RISKY))
        if hw.nodes > 1:
            effects.append(self.fallback(Setting.PIPELINE_PARALLEL, hw.nodes,
                                         f"{hw.nodes} stages across the nodes: a (p − 1)/m bubble; only when sharded "
                                         "data parallel does not fit", penalty=Penalty.RISKY))
        return effects

    def refuse(self, facts: Facts, plan: Plan) -> Effect | None:
        mp, gpus, per_node = plan.model_parallel_size, facts.hardware.num_gpus, max(len(facts.hardware.gpus), 1)
        if mp > 1 and Method.of(plan.method).spec.quantized_base:
            setting, value = ((Setting.TENSOR_PARALLEL, plan.tensor_parallel) if plan.tensor_parallel > 1
                              else (Setting.PIPELINE_PARALLEL, plan.pipeline_parallel))
            return self.forbid(setting, value, "bitsandbytes' 4-bit layers do not split over tensor or pipeline "
                               "parallel ranks (transformers' TP shards only torchao and fp8 weights; Megatron-LM has "
                               "no QLoRA): shard a QLoRA base with FSDP FULL_SHARD", hard=True)
        if mp > 1 and (gpus < mp or gpus % mp):  # names the split the plan asks for (pipeline alone: that one)
            setting = Setting.TENSOR_PARALLEL if plan.tensor_parallel > 1 else Setting.PIPELINE_PARALLEL
            return self.forbid(setting, getattr(plan, setting),
                               f"tensor parallel {plan.tensor_parallel} x pipeline parallel {plan.pipeline_parallel} "
                               f"needs a multiple of {mp} GPUs, the hardware has {gpus}", hard=True)
        if plan.tensor_parallel > per_node:
            return self.forbid(Setting.TENSOR_PARALLEL, plan.tensor_parallel,
                               f"a node has {len(facts.hardware.gpus)} GPUs (tensor parallel stays inside a node)",
                               hard=True)
        return None

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        if plan.pipeline_parallel > 1:
            interleave = plan.virtual_pipeline == 1 and equal_chunks(facts, plan.pipeline_parallel, 2)
            return [self.warn(f"tensor parallel {plan.tensor_parallel} x pipeline parallel {plan.pipeline_parallel}: "
                              "the HF Trainer and accelerate do not run pipeline parallelism; use Megatron-LM, "
                              "DeepSpeed's pipeline engine or torch.distributed.pipelining"
                              + ("; Megatron-LM's and torch.distributed.pipelining's interleaved schedule cuts the "
                                 "bubble by its chunks a stage (estimate --virtual-pipeline 2 prices it)"
                                 if interleave else ""))]
        if plan.tensor_parallel > 1:
            ddp = Parallelism.of(plan.parallelism).replicated and plan.data_parallel_size > 1
            return [self.warn(f"tensor parallel {plan.tensor_parallel}: the HF Trainer runs it through accelerate 1.10 "
                              f"or later (TrainingArguments.parallelism_config = ParallelismConfig(tp_size="
                              f"{plan.tensor_parallel})) for models whose config has a base_model_tp_plan"
                              + (f", but not beside DDP: shard the {plan.data_parallel_size} replicas with FSDP2 "
                                 "(dp_shard_size) or run Megatron-LM" if ddp else
                                 "; else Megatron-LM or torch.distributed.tensor.parallel"))]
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
    rationale = ("1F1B leaves each stage idle for (p − 1) stage times of every step. The interleaved schedule gives "
                 "each stage v non-adjacent chunks of L/(p·v) layers, so the bubble shrinks to (p − 1)/v stage "
                 "times, for v times the stage-to-stage traffic and a first stage that holds (1 + (p − 1)/(p·v)) "
                 "micro-batches' activations instead of one. Megatron-LM and NeMo run it "
                 "(virtual_pipeline_model_parallel_size), as torch.distributed.pipelining's ScheduleInterleaved1F1B "
                 "(torchtitan) does; the Trainer runs no pipeline. advisor prices it when asked.")

    def refuse(self, facts: Facts, plan: Plan) -> Effect | None:
        v, pp = plan.virtual_pipeline, plan.pipeline_parallel
        if v > 1 and pp <= 1:
            return self.forbid(Setting.VIRTUAL_PIPELINE, v, "interleaving splits each pipeline stage into chunks: it "
                               "needs --pipeline-parallel 2 or more", hard=True)
        if v > 1 and not equal_chunks(facts, pp, v):
            return self.forbid(Setting.VIRTUAL_PIPELINE, v, f"{facts.model.num_layers} layers do not split into {pp} "
                               f"stages of {v} equal chunks", hard=True)
        return None

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        if plan.virtual_pipeline <= 1:
            return []
        return [self.warn(f"interleaved pipeline, {plan.virtual_pipeline} chunks a stage: Megatron-LM / NeMo "
                          "(virtual_pipeline_model_parallel_size) or torch.distributed.pipelining's "
                          "ScheduleInterleaved1F1B run it, not the HF Trainer", setting=Setting.VIRTUAL_PIPELINE)]
