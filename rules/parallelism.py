"""Parallelism: one device, DDP (never DP), ZeRO/FSDP sharding only when it pays."""

from __future__ import annotations

from advisor.core.vocabulary import Method, Offload, Parallelism, Penalty
from probes.adapters import adapter_parameters
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
    rationale = (
        "With one GPU (or the CPU) there is nothing to distribute; DeepSpeed on a single GPU that fits "
        "the model only slows things down."
    )

    def propose(self, facts: Facts) -> list[Effect]:
        if facts.hardware.num_gpus > 1:
            return []
        why = "a single device: nothing to distribute"
        offloading = "on one GPU only to offload (ZeRO-Offload / FSDP CPUOffload): see the offload setting"
        return [
            self.fallback(Setting.PARALLELISM, v, offloading, penalty=Penalty.NONE)
            if self._offloads_alone(facts, v)
            else self.forbid(Setting.PARALLELISM, v, why)
            for v in Parallelism
            if v != Parallelism.NONE
        ]

    @staticmethod
    def _offloads_alone(facts: Facts, parallelism: Parallelism) -> bool:
        """A sharding strategy that runs on one GPU to offload to the CPU (ZeRO-Offload, Ren et al. 2021 sec. 4;
        FSDP's CPUOffload): not on the CPU, and only those that can offload (ZeRO-2 / ZeRO-3 / FULL_SHARD)."""
        return (
            facts.hardware.num_gpus == 1
            and parallelism.stage >= 2
            and len(parallelism.spec.offloads) > 1
            and not parallelism.spec.replicated_across_nodes
        )

    def refuse(self, facts: Facts, plan: Plan) -> Effect | None:
        replicas = plan.shard_group_size > 1  # context-parallel ranks hold the same weights as replicas do
        if plan.parallelism == Parallelism.NONE and replicas:
            return self.forbid(
                Setting.PARALLELISM,
                plan.parallelism,
                f"{plan.shard_group_size} model replicas need a data-parallel strategy (ddp)",
                hard=True,
            )
        if plan.parallelism != Parallelism.NONE and not replicas:
            if plan.offload != Offload.NONE and self._offloads_alone(facts, Parallelism.of(plan.parallelism)):
                return None
            return self.forbid(
                Setting.PARALLELISM,
                plan.parallelism,
                "needs several model replicas (GPUs / model-parallel size, or processes on the CPU), "
                "or on one GPU an offload (ZeRO-2 / ZeRO-3 / fsdp-full-shard)",
                hard=True,
            )
        return None


@register
class DdpNotDp(Rule):
    id = "parallelism.ddp-not-dp"
    title = "DistributedDataParallel, never DataParallel"
    topic = "parallelism"
    sources = [S.HF_DP_DDP, S.TORCH_DP]
    rationale = (
        "DP is one process with Python threads: GPU 0 scatters inputs, gathers outputs and does extra "
        "work, with 5 data exchanges per batch; DDP is one process per GPU and only all-reduces "
        "gradients. PyTorch itself recommends DDP."
    )

    def propose(self, facts: Facts) -> list[Effect]:
        if facts.hardware.num_gpus <= 1:
            return []
        return [
            self.forbid(
                Setting.PARALLELISM,
                Parallelism.DP,
                "nn.DataParallel: single process, GPU 0 bottleneck, 5 exchanges per batch; use DDP (torchrun)",
            ),
            self.forbid(
                Setting.PARALLELISM,
                Parallelism.NONE,
                f"leaves {facts.hardware.num_gpus - 1} of {facts.hardware.num_gpus} GPUs idle",
            ),
        ]


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
        return [
            self.prefer(
                Setting.PARALLELISM,
                Parallelism.DDP,
                f"{facts.model.num_parameters / 1e6:.0f}M parameters: replicate and all-reduce gradients once per step",
            )
        ]


@register
class ShardingOnlyWhenNeeded(Rule):
    id = "parallelism.deepspeed-only-when-needed"
    title = (
        "ZeRO / FSDP only when the model or a small batch does not fit (models up to ~500M; adapters on any "
        "model: what trains is small)"
    )
    topic = "parallelism"
    sources = [S.HF_DEEPSPEED, S.HF_SCALE, S.ZERO_PAPER, S.PEFT_ACCELERATE]
    rationale = (
        "The documents' decision tree: if the model fits one GPU with room for a small batch, DeepSpeed "
        "only slows things down; if it does not, use DeepSpeed ZeRO (or FSDP). ZeRO-3 also gathers "
        "parameters every layer (~1.5x DDP's traffic). What counts is what trains: under LoRA / QLoRA the "
        "gradients and optimizer states are the adapters' (millions of parameters, not billions), so DDP "
        "all-reduces only those and replicates the frozen base; sharding then saves only the base's bytes, "
        "at the cost of gathering them every layer (no gradients of the base to reduce-scatter: a bounded "
        "slowdown, one rung), and is a fallback for a base DDP cannot hold, whatever the model's size (PEFT's FSDP guide shards to fit a base one GPU cannot hold)."
    )

    def propose(self, facts: Facts) -> list[Effect]:
        if facts.hardware.num_gpus <= 1:
            return []
        heavy_penalty = Penalty.MUCH_SLOWER
        if facts.model.num_parameters <= LARGE_MODEL:
            when, why = None, "shards model states at the cost of communication: only when DDP does not fit"
        else:  # only the frozen base's gathers: no gradients but the adapters' to reduce-scatter
            heavy_penalty = Penalty.SLOWER
            w = facts.workload
            trained = adapter_parameters(facts.model, w.lora_rank, w.lora_targets)
            when = {Setting.METHOD: [m.value for m in Method if m.spec.adapters]}
            why = (
                f"the adapters train {trained / 1e6:,.0f}M parameters: DDP all-reduces only their gradients and "
                "replicates the frozen base; sharding it costs communication, so only when DDP does not fit"
            )
        every_layer = why + " (gathers parameters every layer)"
        light = (Parallelism.ZERO_1, Parallelism.ZERO_2, Parallelism.FSDP_SHARD_GRAD_OP)
        heavy = (Parallelism.ZERO_3, Parallelism.FSDP_FULL_SHARD, Parallelism.FSDP_HYBRID_SHARD)
        return [self.fallback(Setting.PARALLELISM, p, why, penalty=Penalty.SLOWER, when=when) for p in light] + [
            self.fallback(Setting.PARALLELISM, p, every_layer, penalty=heavy_penalty, when=when) for p in heavy
        ]


@register
class ShardLargeModels(Rule):
    id = "parallelism.shard-large-models"
    title = "over ~500M parameters, sharded data parallel competes on equal terms"
    topic = "parallelism"
    sources = [S.LIGHTNING_MODEL_PARALLEL, S.HF_MANY, S.ZERO_PAPER]
    rationale = (
        "Above roughly 500M parameters the replicated model states (16 B/param with mixed-precision "
        "Adam) crowd out activations; ZeRO-2 / FSDP SHARD_GRAD_OP shards states and gradients for "
        "DDP-like traffic."
    )

    def propose(self, facts: Facts) -> list[Effect]:
        if facts.hardware.num_gpus <= 1 or facts.model.num_parameters <= LARGE_MODEL:
            return []
        why = (
            f"{facts.model.num_parameters / 1e9:.1f}B parameters: shard optimizer states and gradients at "
            "DDP-like traffic"
        )
        return [
            self.prefer(
                Setting.PARALLELISM,
                [Parallelism.ZERO_2, Parallelism.FSDP_SHARD_GRAD_OP],
                why,
                when={Setting.METHOD: Method.FULL.value},
            )
        ]


@register
class SlowLinksFavourDdp(Rule):
    id = "parallelism.slow-links-favour-ddp"
    title = "without NVLink, ZeRO-3 and tensor parallel are costly"
    topic = "parallelism"
    sources = [S.HF_CONNECTIVITY, S.HF_DP_DDP]
    rationale = (
        "DDP syncs once per step, so a slow link matters less; ZeRO-3 and tensor parallel exchange data "
        "every layer and need NVLink-class bandwidth (the HF guide: DDP 23 % slower without NVLink even "
        "for gpt2)."
    )

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
        return [
            self.prefer(Setting.PARALLELISM, Parallelism.DDP, "no NVLink between the GPUs: sync as rarely as possible")
        ]

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        hw, links = facts.hardware, self._slow_links(facts)
        per_layer = Parallelism.of(plan.parallelism).stage >= 3 or plan.tensor_parallel > 1
        effects = []
        if links is not None and per_layer:
            effects.append(
                self.warn(
                    f"no NVLink ring through the GPUs ({links}): {plan.parallelism}"
                    + (f" with tensor parallel {plan.tensor_parallel}" if plan.tensor_parallel > 1 else "")
                    + " exchanges data every layer over the slow links; the estimate counts that "
                    "traffic for every micro-batch and still ranks this plan first (it fits a "
                    "larger micro-batch or nothing lighter fits): `advisor validate` measures it"
                )
            )
        if plan.parallelism in (Parallelism.ZERO_3, Parallelism.FSDP_FULL_SHARD) and hw.nodes > 1:
            effects.append(
                self.warn(
                    f"{plan.parallelism} across {hw.nodes} nodes gathers parameters over the "
                    "inter-node network every layer: a fast interconnect (InfiniBand) matters; FSDP "
                    "HYBRID_SHARD keeps that traffic inside each node"
                )
            )
        return effects


@register
class NetworkNeedsNodes(Rule):
    id = "parallelism.network-needs-nodes"
    title = "the network between nodes is priced only with several nodes"
    topic = "parallelism"
    sources = [S.HF_CONNECTIVITY, S.HF_MANY]
    rationale = (
        "Inside one node the GPUs exchange gradients and parameters over NVLink or PCIe; the network "
        "(InfiniBand, Ethernet, its NICs) carries only what crosses nodes. Network settings given for one "
        "node change nothing in the plan, which usually means the node count was left out."
    )

    def propose(self, facts: Facts) -> list[Effect]:
        hw = facts.hardware
        network = (
            ("--interconnect", hw.interconnect),
            ("--inter-node-gbps", hw.inter_node_gbit_s),
            ("--nics-per-node", hw.nics_per_node),
        )
        given = [flag for flag, value in network if value is not None]
        if hw.nodes > 1 or not given:
            return []
        one = len(given) == 1
        return [
            self.warn(
                f"{', '.join(given)} describe{'s' if one else ''} the network between nodes, and this plan "
                f"is for one node: {'it changes' if one else 'they change'} nothing "
                "(several nodes: --nodes N)"
            )
        ]


@register
class OffloadLastResort(Rule):
    id = "parallelism.offload-last-resort"
    title = "CPU offload of ZeRO states only when nothing on the GPUs fits"
    topic = "parallelism"
    sources = [S.HF_DEEPSPEED, S.ZERO_PAPER, S.ZERO_OFFLOAD_PAPER, S.ZERO_INFINITY_PAPER, S.DEEPSPEED_MEMORY]
    rationale = (
        "ZeRO-Offload moves optimizer states (and with stage 3 the parameters) to CPU RAM, on one GPU too "
        "(the seeds' decision tree: does not fit one GPU → DeepSpeed with offload): it fits much larger "
        "models, but every step crosses PCIe and the CPU runs the optimizer, so it is the slowest option "
        "in RAM; it needs 16-18 B/param of host RAM (DeepSpeed's estimators). ZeRO-Infinity moves them on "
        "to NVMe when the host's RAM runs out, slower still."
    )

    def propose(self, facts: Facts) -> list[Effect]:
        if facts.hardware.num_gpus < 1:
            why = "training on the CPU: there is no GPU memory to relieve"
            return [self.forbid(Setting.OFFLOAD, o, why, hard=True) for o in Offload if o != Offload.NONE]
        return [
            self.fallback(
                Setting.OFFLOAD,
                Offload.OPTIMIZER,
                "optimizer states in CPU RAM: every step crosses PCIe",
                penalty=Penalty.OFFLOAD_OPTIMIZER,
            ),
            self.fallback(
                Setting.OFFLOAD,
                Offload.OPTIMIZER_PARAMETERS,
                "optimizer states and parameters in CPU RAM: the slowest plan in RAM",
                penalty=Penalty.OFFLOAD_ALL,
            ),
            self.fallback(
                Setting.OFFLOAD,
                Offload.NVME,
                "optimizer states and parameters on NVMe (ZeRO-Infinity): only when the host's RAM cannot hold them",
                penalty=Penalty.OFFLOAD_NVME,
            ),
        ]

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        hw = facts.hardware
        if plan.offload == Offload.NONE and not plan.activation_offloading:
            return []
        where = "NVMe" if Offload.of(plan.offload).nvme else "CPU RAM"
        if hw.host_memory_assumed:  # a catalog GPU: its typical server's RAM, never unlimited
            return [
                self.warn(
                    f"offload to {where} checked against {hw.host_memory / GIB:,.0f} GiB of host RAM per "
                    f"node, the catalog's typical server for {hw.gpu.name if hw.gpu else 'this GPU'} "
                    f"({hw.typical_host_source}): pass --host-memory SIZE for yours",
                    setting=Setting.OFFLOAD,
                )
            ]
        if hw.host_memory is not None:
            return []
        return [
            self.warn(
                f"offload to {where} planned without knowing the host's RAM: pass --host-memory SIZE "
                "(e.g. 256GB) to check it",
                setting=Setting.OFFLOAD,
            )
        ]

    def refuse(self, facts: Facts, plan: Plan) -> Effect | None:
        """Offload pairs only with sharding that supports it (:class:`advisor.core.vocabulary.ParallelismSpec` offloads)."""
        if plan.offload in Parallelism.of(plan.parallelism).spec.offloads:
            return None
        able = [p.value for p in Parallelism if plan.offload in p.spec.offloads]
        return self.forbid(
            Setting.OFFLOAD, plan.offload, f"needs sharding that offloads it: {', '.join(able)}", hard=True
        )


@register
class FsdpOrDeepSpeed(Rule):
    id = "parallelism.fsdp-or-deepspeed"
    title = "sharding with FSDP (built into PyTorch) or DeepSpeed ZeRO (a package)"
    topic = "parallelism"
    sources = [S.ACCELERATE_FSDP_DEEPSPEED, S.TORCH_FSDP, S.HF_DEEPSPEED]
    rationale = (
        "FSDP's sharding strategies are ZeRO's counterparts (SHARD_GRAD_OP ~ ZeRO-2, FULL_SHARD ~ "
        "ZeRO-3, HYBRID_SHARD: FULL_SHARD inside a node, replicated across nodes) and ship with PyTorch; "
        "DeepSpeed needs its package and adds ZeRO-1 and finer offload (optimizer only). HYBRID_SHARD "
        "exists for several nodes: on one it is FULL_SHARD."
    )

    def propose(self, facts: Facts) -> list[Effect]:
        hw = facts.hardware
        if hw.num_gpus <= 1:
            return []
        effects = []
        if hw.nodes <= 1:
            effects.append(
                self.forbid(
                    Setting.PARALLELISM,
                    Parallelism.FSDP_HYBRID_SHARD,
                    "one node: HYBRID_SHARD is FULL_SHARD (it replicates across nodes)",
                )
            )
        deepspeed = facts.packages.get("deepspeed")
        if deepspeed is False:
            effects.append(
                self.prefer(
                    Setting.PARALLELISM,
                    [p for p in Parallelism if p.fsdp],
                    "DeepSpeed is not installed here; FSDP is part of PyTorch",
                )
            )
        elif deepspeed is True:
            effects.append(
                self.prefer(
                    Setting.PARALLELISM,
                    [p for p in Parallelism if p.deepspeed],
                    "DeepSpeed is installed: ZeRO with its optimizer-only offload",
                )
            )
        return effects
