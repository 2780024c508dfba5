"""The vocabulary: every value a plan, a workload or a profile can take, spelled once, with its facts.

Each dimension is a :class:`StrEnum` (its members compare equal to their strings, so JSON and
``Plan`` fields stay plain strings) with a spec table beside it: what the memory and speed models,
the emitters, the trial builder and the rules need to know about a value. The pydantic ``Literal``
types of the models, the command line's choices and the wizard's lists are made from these enums;
no other module spells a value. The settings themselves (``Setting``) are the rows of
:mod:`advisor.core.dimensions`. To add a value (say an optimizer), add the member and its spec
row here, then the rule that decides it (``rules/``) and that rule's cases file; see
docs/ARCHITECTURE.md.

This module sits in the base layer (``probes``) because the probes' own types use it (the task
head of a model profile, the network between nodes); it imports nothing from the project.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import Literal

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # pragma: no cover - Python 3.10
    class StrEnum(str, Enum):
        """``enum.StrEnum`` of Python 3.11: members are strings."""

        def __str__(self) -> str:
            return str(self.value)


class Vocabulary(StrEnum):
    """Base of the vocabulary's enums."""

    @classmethod
    def of(cls, value: str):
        """The member for a value: ``cls(value)`` without the enum machinery (the planner prices thousands
        of plans). Raises KeyError for an unknown value."""
        return cls._value2member_map_[value]


def literal(enum: type[Enum]):
    """The ``Literal[...]`` type of an enum's values, in declaration order (for pydantic fields, so the
    JSON and its schema keep plain strings)."""
    return Literal[tuple(member.value for member in enum)]  # type: ignore[return-value]


def values(enum: type[Enum]) -> tuple[str, ...]:
    """The values of an enum in declaration order (the order of the JSON schema and the CLI's choices)."""
    return tuple(member.value for member in enum)


def searched(enum: type[Enum]) -> tuple[str, ...]:
    """The values of a dimension in the planner's search order: :data:`SEARCH_ORDER` where the order matters
    (ties in speed go to the earlier value, and a recommendation lists alternatives in it), then the values it
    does not name, in declaration order."""
    order = SEARCH_ORDER.get(enum, ())
    return tuple(member.value for member in (*order, *(m for m in enum if m not in order)))


# -- where a plan runs ---------------------------------------------------------------------------

class Device(Vocabulary):
    """Where training runs."""

    CUDA = "cuda"
    CPU = "cpu"


# -- precision -----------------------------------------------------------------------------------

class Precision(Vocabulary):
    """The compute precision of a plan (search order: :data:`SEARCH_ORDER`)."""

    FP32 = "fp32"  #: full precision (TF32 matmuls where the plan's tf32 flag is on)
    FP16 = "fp16"  #: fp16 mixed precision (autocast) with dynamic loss scaling (GradScaler)
    BF16 = "bf16"  #: bf16 mixed precision (autocast), no loss scaling

    @property
    def mixed(self) -> bool:
        """A 16-bit autocast precision."""
        return self is not Precision.FP32

    @property
    def activation_bytes(self) -> int:
        """Bytes of one activation element in the compute dtype."""
        return 4 if self is Precision.FP32 else 2


# -- what is trained ------------------------------------------------------------------------------

@dataclass(frozen=True)
class MethodSpec:
    """What one fine-tuning method trains and holds.

    Attributes:
        adapters: trains low-rank adapters beside frozen base weights (LoRA, Hu et al. 2021,
            https://arxiv.org/abs/2106.09685 sec. 4.1) instead of every weight.
        quantized_base: the frozen linear weights are stored in 4-bit NormalFloat with double
            quantization (QLoRA, Dettmers et al. 2023, https://arxiv.org/abs/2305.14314 sec. 3).
        package: the package the Trainer needs for it (None: transformers alone).
        summary: one line for help texts and explanations.
    """

    adapters: bool
    quantized_base: bool
    summary: str
    package: str | None = None


class Method(Vocabulary):
    """What a plan trains: every weight, or low-rank adapters on a frozen (4-bit) base."""

    FULL = "full"
    LORA = "lora"
    QLORA = "qlora"

    @property
    def spec(self) -> MethodSpec:
        return METHOD_SPECS[self]


METHOD_SPECS: dict[Method, MethodSpec] = {
    Method.FULL: MethodSpec(adapters=False, quantized_base=False, summary="full fine-tuning: every weight is trained"),
    Method.LORA: MethodSpec(adapters=True, quantized_base=False, package="peft",
                            summary="LoRA: low-rank adapters trained beside the frozen 16-bit base weights"),
    Method.QLORA: MethodSpec(adapters=True, quantized_base=True, package="bitsandbytes",
                             summary="QLoRA: LoRA adapters over base weights frozen in 4-bit NF4"),
}


class LoraTargets(Vocabulary):
    """The linear layers that get adapters (PEFT ``LoraConfig.target_modules``)."""

    ALL_LINEAR = "all-linear"  #: every linear layer of the blocks (QLoRA sec. 4: needed to match full fine-tuning)
    ATTENTION = "attention"  #: the attention projections q, k, v, o (the LoRA paper's sec. 7.1 choice)
    #: the query and value projections only: PEFT's own default for Llama-style models
    #: (``peft.utils.constants.TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING``, ``["q_proj", "v_proj"]``) and
    #: LitGPT's (``lora_query`` and ``lora_value``); the LoRA paper's best split of a fixed budget (sec. 7.1, Table 5)
    QUERY_VALUE = "q-v"

    @property
    def attention_only(self) -> bool:
        """Whether the MLP's linear layers stay frozen without adapters."""
        return self is not LoraTargets.ALL_LINEAR


class WeightsDtype(Vocabulary):
    """The dtype the model's (trainable or frozen) 16/32-bit weights are held in."""

    FP32 = "fp32"  #: fp32 weights; under mixed precision autocast makes 16-bit copies (AMP's master weights)
    BF16 = "bf16"  #: loaded with ``torch_dtype=torch.bfloat16``: no fp32 master copy ("pure bf16")
    FP16 = "fp16"  #: loaded with ``torch_dtype=torch.float16``: a frozen adapter base under fp16 mixed precision
    #: (V100 / T4, which have no bf16), never trained weights

    @property
    def bytes(self) -> int:
        """Bytes per weight element."""
        return 4 if self is WeightsDtype.FP32 else 2


# -- optimizers ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class OptimizerSpec:
    """What advisor knows about one optimizer.

    Attributes:
        state_bytes_per_param: bytes of optimizer state per parameter (None: Adafactor's factored
            statistics, computed from the parameter shapes by the memory model).
        step_traffic_bytes_per_param: memory traffic of one optimizer step, reads + writes (speed model).
        trainer_optim: ``TrainingArguments.optim`` (``transformers.training_args.OptimizerNames``);
            AdamW's fused name is used on CUDA (:attr:`trainer_optim_fused`).
        factory: ``module:Class`` that builds it in a trial; ``factory_kwargs`` its fixed arguments.
        package: the optional package it needs (None: torch or transformers).
        implementation: the implementation the recommendation names ('fused' / 'foreach' for AdamW,
            chosen by device in :meth:`Optimizer.implementation`).
        learning_rate: the trial's learning rate (a trial measures memory and time, not convergence).
        summary: one line for help texts.
        foreach_temporary_bytes_per_param: what the multi-tensor (foreach) step allocates beside the
            states (AdamW: a copy of the parameters, fp32); nothing when fused.
        update_temporary_bytes_per_element: the step's temporary per element of the largest matrix
            (Adafactor builds each matrix's fp32 update before applying it).
        states_follow_weights: the states take the parameters' dtype (torch AdamW's ``exp_avg`` is
            ``zeros_like(param)``): half the bytes for bf16 weights.
        paged: the states live in CUDA unified memory and are evicted page by page to CPU RAM when the GPU
            runs short (QLoRA sec. 3, "Paged Optimizers"): memory spikes do not end the run.
        trainer_optim_args: the Trainer builds this optimizer with none of ``factory_kwargs`` unless they come as
            ``TrainingArguments.optim_args`` (``transformers/trainer_optimizer.py:_get_sgd``: SGD's momentum
            defaults to 0, no state), so the emitted recipe passes them.
        trainer_optim_dtensor: the ``TrainingArguments.optim`` of an implementation with the same states that steps
            FSDP2's DTensor parameters, for a bitsandbytes optimizer whose kernels do not (bitsandbytes issues 1633
            and 89): torchao's AdamW8bit (``adamw_torch_8bit``: 8-bit block-wise states, 256-element blocks, as
            bitsandbytes'), or torch's fused AdamW for the 32-bit paged one; ``dtensor_implementation`` names it
            (torchao: also the package it needs).
        dtensor_factory: ``module:Class`` of that stand-in, which ``advisor validate`` builds for a trial whose
            parameters are DTensors (FSDP2's ``fully_shard``), as the emitted ``optim`` runs it: torchao's
            ``torchao.optim:AdamW8bit`` (what the Trainer's ``adamw_torch_8bit`` builds with torchao >= 0.11,
            ``transformers/trainer_optimizer.py:_get_torchao_optimizer``), or ``torch.optim:AdamW``;
            ``dtensor_package`` is the package it needs (None: torch's own).
    """

    state_bytes_per_param: float | None
    step_traffic_bytes_per_param: float
    trainer_optim: str
    factory: str
    summary: str
    package: str | None = None
    implementation: str = "foreach"
    trainer_optim_fused: str | None = None
    factory_kwargs: dict = field(default_factory=dict)
    learning_rate: float = 1e-4
    foreach_temporary_bytes_per_param: float = 0
    update_temporary_bytes_per_element: float = 0
    states_follow_weights: bool = False
    paged: bool = False
    trainer_optim_args: bool = False
    trainer_optim_dtensor: str | None = None
    dtensor_implementation: str | None = None
    dtensor_factory: str | None = None
    dtensor_package: str | None = None


class Optimizer(Vocabulary):
    """The optimizer of a plan (search order: :data:`SEARCH_ORDER`)."""

    ADAMW = "adamw"
    ADAFACTOR = "adafactor"
    ADAMW_8BIT = "adamw-8bit"
    PAGED_ADAMW = "paged-adamw"
    PAGED_ADAMW_8BIT = "paged-adamw-8bit"
    SGD = "sgd"

    @property
    def spec(self) -> OptimizerSpec:
        return OPTIMIZER_SPECS[self]

    def step_temporary_bytes(self, device: str, parameters: int, largest_elements: int) -> int:
        """Bytes the optimizer step allocates beside the states, for ``parameters`` parameters whose largest
        tensor has ``largest_elements`` elements (see :class:`OptimizerSpec`)."""
        spec = self.spec
        foreach = spec.foreach_temporary_bytes_per_param * parameters if self.implementation(device) == "foreach" else 0
        return int(foreach + spec.update_temporary_bytes_per_element * largest_elements)

    def implementation(self, device: str) -> str:
        """The implementation a plan on ``device`` uses: fused AdamW on CUDA, else the spec's."""
        if self.spec.trainer_optim_fused and device == Device.CUDA:
            return "fused"
        return self.spec.implementation


#: Sources: the HF guide's "Anatomy of Model's Memory" (AdamW 8 B/param, 8-bit Adam 2, SGD with
#: momentum 4, https://huggingface.co/docs/transformers/v4.18.0/en/performance#anatomy-of-models-memory);
#: Adafactor: Shazeer & Stern 2018 (https://arxiv.org/abs/1804.04235) sec. 3; torch.optim.AdamW
#: (foreach / fused, https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html); bitsandbytes
#: AdamW8bit (https://huggingface.co/docs/bitsandbytes/main/en/reference/optim/adamw); step traffic:
#: AdamW reads param, grad, m, v and writes param, m, v in fp32 (7 x 4 B); SGD's momentum buffer is a clone of the
#: gradient (torch.optim.SGD: the parameter's dtype). Paged variants: bitsandbytes
#: PagedAdamW / PagedAdamW8bit (https://huggingface.co/docs/bitsandbytes/main/en/reference/optim/adamw), Trainer
#: ``optim="paged_adamw_32bit"`` / ``"paged_adamw_8bit"`` (QLoRA sec. 3).
OPTIMIZER_SPECS: dict[Optimizer, OptimizerSpec] = {
    Optimizer.ADAMW: OptimizerSpec(
        state_bytes_per_param=8, step_traffic_bytes_per_param=28.0, trainer_optim="adamw_torch",
        trainer_optim_fused="adamw_torch_fused", factory="torch.optim:AdamW", foreach_temporary_bytes_per_param=4,
        states_follow_weights=True, summary="torch AdamW (fused on CUDA)"),
    Optimizer.ADAMW_8BIT: OptimizerSpec(
        state_bytes_per_param=2, step_traffic_bytes_per_param=16.0, trainer_optim="adamw_bnb_8bit",
        factory="bitsandbytes.optim:AdamW8bit", package="bitsandbytes", implementation="bitsandbytes",
        trainer_optim_dtensor="adamw_torch_8bit", dtensor_implementation="torchao",
        dtensor_factory="torchao.optim:AdamW8bit", dtensor_package="torchao", summary="bitsandbytes 8-bit AdamW"),
    Optimizer.PAGED_ADAMW: OptimizerSpec(
        state_bytes_per_param=8, step_traffic_bytes_per_param=28.0, trainer_optim="paged_adamw_32bit",
        factory="bitsandbytes.optim:PagedAdamW32bit", package="bitsandbytes", implementation="bitsandbytes",
        paged=True, trainer_optim_dtensor="adamw_torch_fused", dtensor_implementation="fused",
        dtensor_factory="torch.optim:AdamW",
        summary="bitsandbytes paged AdamW (32-bit states in unified memory)"),
    Optimizer.PAGED_ADAMW_8BIT: OptimizerSpec(
        state_bytes_per_param=2, step_traffic_bytes_per_param=16.0, trainer_optim="paged_adamw_8bit",
        factory="bitsandbytes.optim:PagedAdamW8bit", package="bitsandbytes", implementation="bitsandbytes",
        paged=True, trainer_optim_dtensor="adamw_torch_8bit", dtensor_implementation="torchao",
        dtensor_factory="torchao.optim:AdamW8bit", dtensor_package="torchao", summary="bitsandbytes paged 8-bit AdamW"),
    Optimizer.ADAFACTOR: OptimizerSpec(
        state_bytes_per_param=None, step_traffic_bytes_per_param=20.0, trainer_optim="adafactor",
        factory="transformers.optimization:Adafactor", implementation="transformers", learning_rate=1e-3,
        update_temporary_bytes_per_element=4,
        factory_kwargs={"scale_parameter": False, "relative_step": False, "warmup_init": False},
        summary="transformers Adafactor (factored second moments)"),
    Optimizer.SGD: OptimizerSpec(
        state_bytes_per_param=4, step_traffic_bytes_per_param=16.0, trainer_optim="sgd",
        factory="torch.optim:SGD", factory_kwargs={"momentum": 0.9}, learning_rate=1e-3, trainer_optim_args=True,
        states_follow_weights=True, summary="SGD with momentum"),
}


# -- data parallelism and sharding -----------------------------------------------------------------

@dataclass(frozen=True)
class ParallelismSpec:
    """What one data-parallel strategy is.

    Attributes:
        stage: the ZeRO stage it amounts to (ZeRO paper sec. 5: 1 optimizer states, 2 + gradients,
            3 + parameters; 0: nothing sharded).
        framework: who runs it: 'none', 'torch' (DP / DDP), 'deepspeed' or 'fsdp'.
        offloads: the offload values it pairs with (ZeRO-Offload: the optimizer at any stage, the
            parameters at stage 3; FSDP's CPUOffload moves parameters, gradients and the optimizer
            step together, so only 'optimizer+parameters' where parameters are sharded).
        fsdp_option, fsdp_strategy: TrainingArguments' ``fsdp`` option and accelerate's
            ``fsdp_sharding_strategy`` (FSDP strategies only).
        replicated_across_nodes: shards inside a node and replicates across nodes (HYBRID_SHARD).
        trial_as: the strategy a torch.distributed trial runs in its place (None: itself).
    """

    stage: int
    framework: str
    offloads: tuple[str, ...] = ("none",)
    fsdp_option: str | None = None
    fsdp_strategy: str | None = None
    replicated_across_nodes: bool = False
    trial_as: str | None = None


class Parallelism(Vocabulary):
    """The data-parallel strategy of a plan."""

    NONE = "none"
    DP = "dp"
    DDP = "ddp"
    ZERO_1 = "zero-1"
    ZERO_2 = "zero-2"
    ZERO_3 = "zero-3"
    FSDP_SHARD_GRAD_OP = "fsdp-shard-grad-op"
    FSDP_FULL_SHARD = "fsdp-full-shard"
    FSDP_HYBRID_SHARD = "fsdp-hybrid-shard"

    @property
    def spec(self) -> ParallelismSpec:
        return PARALLELISM_SPECS[self]

    @property
    def stage(self) -> int:
        """The ZeRO stage it amounts to (0: nothing sharded)."""
        return self.spec.stage

    @property
    def replicated(self) -> bool:
        """Every GPU holds the whole model and syncs gradients (DP, DDP)."""
        return self.spec.framework == "torch"

    @property
    def deepspeed(self) -> bool:
        return self.spec.framework == "deepspeed"

    @property
    def fsdp(self) -> bool:
        return self.spec.framework == "fsdp"


class Offload(Vocabulary):
    """What a sharded plan keeps in CPU RAM (ZeRO-Offload, FSDP CPUOffload)."""

    NONE = "none"
    OPTIMIZER = "optimizer"
    OPTIMIZER_PARAMETERS = "optimizer+parameters"
    NVME = "nvme"  #: ZeRO-Infinity: optimizer states and parameters on NVMe (Rajbhandari et al. 2021)

    @property
    def optimizer(self) -> bool:
        """The optimizer states (and fp32 masters) live off the GPU."""
        return self is not Offload.NONE

    @property
    def parameters(self) -> bool:
        """The parameters live off the GPU too."""
        return self in (Offload.OPTIMIZER_PARAMETERS, Offload.NVME)

    @property
    def nvme(self) -> bool:
        """Off the GPU means on NVMe, with CPU RAM as a staging buffer (ZeRO-Infinity,
        https://arxiv.org/abs/2104.07857 sec. 5)."""
        return self is Offload.NVME


_ZERO_OFFLOADS = (Offload.NONE.value, Offload.OPTIMIZER.value)
_ALL_OFFLOADS = values(Offload)  # ZeRO-3: CPU and NVMe (ZeRO-Infinity) offload
#: Sources: ZeRO paper sec. 5 (https://arxiv.org/abs/1910.02054); PyTorch FSDP ShardingStrategy
#: (https://pytorch.org/docs/stable/fsdp.html): SHARD_GRAD_OP ~ ZeRO-2, FULL_SHARD ~ ZeRO-3,
#: HYBRID_SHARD = FULL_SHARD inside a node, replicated across nodes; DeepSpeed ZeRO-Offload
#: (https://www.deepspeed.ai/tutorials/zero-offload/); ZeRO-Infinity's NVMe offload, stage 3 only
#: (https://www.deepspeed.ai/tutorials/zero/#offloading-to-cpu-and-nvme-with-zero-infinity); TrainingArguments "fsdp".
PARALLELISM_SPECS: dict[Parallelism, ParallelismSpec] = {
    Parallelism.NONE: ParallelismSpec(stage=0, framework="none"),
    Parallelism.DP: ParallelismSpec(stage=0, framework="torch", trial_as="ddp"),
    Parallelism.DDP: ParallelismSpec(stage=0, framework="torch"),
    Parallelism.ZERO_1: ParallelismSpec(stage=1, framework="deepspeed", offloads=_ZERO_OFFLOADS, trial_as="zero-2"),
    Parallelism.ZERO_2: ParallelismSpec(stage=2, framework="deepspeed", offloads=_ZERO_OFFLOADS),
    Parallelism.ZERO_3: ParallelismSpec(stage=3, framework="deepspeed", offloads=_ALL_OFFLOADS),
    Parallelism.FSDP_SHARD_GRAD_OP: ParallelismSpec(stage=2, framework="fsdp", fsdp_option="shard_grad_op",
                                                    fsdp_strategy="SHARD_GRAD_OP"),
    Parallelism.FSDP_FULL_SHARD: ParallelismSpec(stage=3, framework="fsdp", fsdp_option="full_shard",
                                                 fsdp_strategy="FULL_SHARD",
                                                 offloads=(Offload.NONE.value, Offload.OPTIMIZER_PARAMETERS.value)),
    Parallelism.FSDP_HYBRID_SHARD: ParallelismSpec(stage=3, framework="fsdp", fsdp_option="hybrid_shard",
                                                   fsdp_strategy="HYBRID_SHARD", replicated_across_nodes=True,
                                                   offloads=(Offload.NONE.value,
                                                             Offload.OPTIMIZER_PARAMETERS.value)),
}


# -- the question ----------------------------------------------------------------------------------

class Objective(Vocabulary):
    """What matters most when ranking plans."""

    SPEED = "speed"  #: the fastest plan that fits
    MEMORY = "memory"  #: the plan with the least device memory


class Task(Vocabulary):
    """The task head a model is trained with."""

    CAUSAL_LM = "causal-lm"
    MASKED_LM = "masked-lm"
    SEQUENCE_CLASSIFICATION = "sequence-classification"
    QUESTION_ANSWERING = "question-answering"
    SEQ2SEQ_LM = "seq2seq-lm"

    @property
    def auto_class(self) -> str:
        """The transformers Auto class of the head ("Auto Classes",
        https://huggingface.co/docs/transformers/model_doc/auto)."""
        return _AUTO_CLASSES[self]

    @property
    def language_modeling(self) -> bool:
        """A head over the vocabulary (logits of shape (b, s, vocab))."""
        return self in (Task.CAUSAL_LM, Task.MASKED_LM, Task.SEQ2SEQ_LM)


_AUTO_CLASSES = {
    Task.CAUSAL_LM: "AutoModelForCausalLM", Task.MASKED_LM: "AutoModelForMaskedLM",
    Task.SEQ2SEQ_LM: "AutoModelForSeq2SeqLM", Task.SEQUENCE_CLASSIFICATION: "AutoModelForSequenceClassification",
    Task.QUESTION_ANSWERING: "AutoModelForQuestionAnswering",
}


class Family(Vocabulary):
    """A model's architecture family."""

    DECODER_ONLY = "decoder-only"
    ENCODER_ONLY = "encoder-only"
    ENCODER_DECODER = "encoder-decoder"

    @property
    def tasks(self) -> tuple[Task, ...]:
        """The task heads transformers has for the family (Auto classes), the default first."""
        return _FAMILY_TASKS[self]

    @property
    def default_task(self) -> Task:
        """The head a config without ``architectures`` is trained with: the family's pretraining objective."""
        return self.tasks[0]


_FAMILY_TASKS = {
    Family.DECODER_ONLY: (Task.CAUSAL_LM, Task.SEQUENCE_CLASSIFICATION, Task.QUESTION_ANSWERING),
    Family.ENCODER_ONLY: (Task.MASKED_LM, Task.SEQUENCE_CLASSIFICATION, Task.QUESTION_ANSWERING),
    Family.ENCODER_DECODER: (Task.SEQ2SEQ_LM, Task.SEQUENCE_CLASSIFICATION, Task.QUESTION_ANSWERING),
}


# -- links -----------------------------------------------------------------------------------------

class Link(Vocabulary):
    """A link between GPUs inside a node."""

    NVLINK = "nvlink"
    PCIE = "pcie"


class Network(Vocabulary):
    """The network between nodes."""

    INFINIBAND = "infiniband"
    ETHERNET = "ethernet"

    @property
    def gbit_s(self) -> float:
        """Catalog bandwidth per node, Gb/s (see :data:`NETWORK_GBIT_S`)."""
        return NETWORK_GBIT_S[self]

    @property
    def label(self) -> str:
        return _NETWORK_LABELS[self]


#: Catalog bandwidth between nodes per node, Gb/s: InfiniBand HDR, 200 Gb/s per port
#: (https://www.nvidia.com/en-us/networking/infiniband/qm8700/); 100 Gb/s Ethernet.
NETWORK_GBIT_S = {Network.INFINIBAND: 200.0, Network.ETHERNET: 100.0}
_NETWORK_LABELS = {Network.INFINIBAND: "InfiniBand HDR", Network.ETHERNET: "Ethernet"}
#: InfiniBand's generations by their port speed, Gb/s (NVIDIA InfiniBand switching: EDR 100, HDR 200, NDR 400, XDR
#: 800 Gb/s a port, https://www.nvidia.com/en-us/networking/infiniband-switching/).
INFINIBAND_GENERATIONS = {100.0: "EDR", 200.0: "HDR", 400.0: "NDR", 800.0: "XDR"}
DEFAULT_NETWORK = Network.INFINIBAND  #: assumed between nodes when the user does not say


#: The planner's search order where it differs from declaration order: the preferred value first.
SEARCH_ORDER: dict[type[Enum], tuple[Enum, ...]] = {
    Precision: (Precision.BF16, Precision.FP16, Precision.FP32),
    Optimizer: (Optimizer.ADAMW, Optimizer.ADAMW_8BIT, Optimizer.PAGED_ADAMW_8BIT, Optimizer.PAGED_ADAMW,
                Optimizer.ADAFACTOR, Optimizer.SGD),
    WeightsDtype: (WeightsDtype.FP32, WeightsDtype.BF16, WeightsDtype.FP16),
    Method: (Method.FULL, Method.LORA, Method.QLORA),
}


# -- the fallback ladder ---------------------------------------------------------------------------

class Penalty(IntEnum):
    """What a fallback costs: one ladder for every rule, cheapest first; a rule names a rung, never a number.

    A plan's penalty is the sum of its fallbacks' rungs; under the 'speed' objective the planner takes the
    plan with the least penalty that fits, at equal penalty the one with the fewest RISKY rungs (a plan that is
    only slower beats one whose convergence may suffer), then the fastest."""

    NONE = 0
    SLOWER = 1  #: a bounded slowdown: activation checkpointing (~20-30 %); ZeRO-1/2 on a model DDP could hold
    MUCH_SLOWER = 2  #: fp32 on tensor cores; 8-bit optimizer states; bf16 weights without fp32 masters; ZeRO-3 /
    #: FULL_SHARD on a model DDP could hold; the optimizer step in backward (no accumulation, no clipping)
    RISKY = 3  #: convergence may suffer (Adafactor), or a framework beyond the Trainer (tensor / pipeline / expert
    #: parallel)
    ADAPTERS = 6  #: trains low-rank adapters, not the model: above any sum of the light full fine-tuning fallbacks
    QUANTIZED_ADAPTERS = 7  #: adapters over a 4-bit base: LoRA plus one light fallback (dequantization time, a small
    #: quantization error: NF4 with double quantization matched 16-bit LoRA, QLoRA sec. 4)
    OFFLOAD_OPTIMIZER = 8  #: optimizer states in CPU RAM: every step crosses PCIe
    OFFLOAD_ALL = 9  #: optimizer states and parameters in CPU RAM: the slowest plan in RAM
    OFFLOAD_NVME = 10  #: optimizer states and parameters on NVMe (ZeRO-Infinity): slower still
