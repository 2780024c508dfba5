"""The table of plan dimensions: one row per setting a plan has or a rule sets, and every list of settings derived
from it.

A row says the setting's role in the search (:class:`Role`), its command-line flag (metavar, upper bound, whether
``estimate`` and ``validate`` take it, ``estimate``'s default), whether it matters only on several GPUs, which cost
caches read it (the model states' and the activations' memo keys), and what
each consumer of a plan does with a value other than the field's default (:class:`Handling`: runs it, refuses it
with the reason, or swaps it for another value with a note): the trial (``advisor validate``), the fake-tensor
simulation (``estimate --simulate``) and the hand-off (``--emit``: the Trainer, accelerate, DeepSpeed and torchrun
files). ``SEARCHED``, ``LAYOUT``, ``CROSSED``, ``STACK_SETTINGS``, ``PLAN_FLAGS``, ``ESTIMATE_DEFAULTS``, the
:class:`Setting` enum and the consumers' refusals are read from it; no other module lists settings.

To add a dimension: the :class:`advisor.core.plan.Plan` field (its type, default and description: the flag's help),
its row here, and what prices and decides it (docs/ARCHITECTURE.md, "How to add a dimension"). ``tests`` check that
every ``Plan`` field has exactly one row.

A leaf module: it imports the vocabulary only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from advisor.core.kernels import Checkpointing, Framework, LossKernel
from advisor.core.limits import MAX_GPUS_PER_NODE, MAX_LAYERS, MAX_NODES, MAX_WIDTH
from advisor.core.vocabulary import PARALLELISM_SPECS, Offload, Optimizer, Parallelism, StrEnum, Vocabulary


class Role(StrEnum):
    """What the search does with a setting."""

    LAYOUT = "layout"  #: crossed into the layouts a rule's ``refuse`` judges (with the tensor / pipeline split)
    SPLIT = "split"  #: the tensor / pipeline split: the frame of a layout (tried only while it could win)
    CROSSED = "crossed"  #: crossed with each legal layout before the micro-batch (a group of candidates)
    BATCH = "batch"  #: the micro-batch (searched: divisors of the per-replica batch) and the accumulation it implies
    STACK = "stack"  #: the software stack: per layout, the first value the rules allow and no rule refuses
    #: priced as given (``estimate`` / ``validate`` flags, the workload's adapter shape): never searched
    PRICED = "priced"
    RULE = "rule"  #: set by a rule (an ``Effect`` of kind 'set'), not a plan field
    MACHINE = "machine"  #: follows from the hardware (device, GPUs, CPU processes)


class Consumer(StrEnum):
    """Who runs a plan after the planner: what a row's :class:`Handling` is about."""

    TRIAL = "trial"  #: ``advisor validate``'s trial steps (advisor/measure/trial.py, dist_worker.py)
    SIMULATE = "simulate"  #: ``estimate --simulate``: one step on fake tensors (advisor/measure/simulate.py)
    EMIT = "emit"  #: ``--emit``: the Trainer's, accelerate's, DeepSpeed's and torchrun's files (advisor/app/emit.py)


class Verdict(StrEnum):
    RUNS = "runs"
    REFUSES = "refuses"
    SWAPS = "swaps"


@dataclass(frozen=True)
class Handling:
    """What a consumer does with a setting's value other than the ``Plan`` field's default.

    Attributes:
        verdict: runs it, refuses it (``reason``: one line for the user), or swaps it for ``to`` (``reason``: the
            note that says what the swap changes).
        values: the values it applies to (None: every value but the default).
        when: it applies only while these other plan fields have these values (e.g. a checkpointing policy only
            with checkpointing on).
        runs_in: an ``--emit`` target whose files run the value as priced (:data:`TRL_TARGET`: TRL's ``SFTConfig``);
            the swap is the other targets' (the Trainer's files), and the plan is not an estimate only.
    """

    verdict: Verdict
    reason: str = ""
    to: Any = None
    values: tuple[Any, ...] | None = None
    when: tuple[tuple[str, Any], ...] = ()
    runs_in: str | None = None

    def applies(self, plan: Any, name: str, default: Any) -> bool:
        value = getattr(plan, name)
        if value == default or (self.values is not None and value not in self.values):
            return False
        return all(getattr(plan, k) == v for k, v in self.when)


def refuses(reason: str, *values: Any, when: tuple[tuple[str, Any], ...] = ()) -> Handling:
    return Handling(Verdict.REFUSES, reason, values=values or None, when=when)


def swaps(to: Any, note: str, *values: Any, runs_in: str | None = None) -> Handling:
    return Handling(Verdict.SWAPS, note, to=to, values=values or None, runs_in=runs_in)


#: The ``--emit`` target that writes TRL's ``SFTConfig`` (``advisor.app.emit``): TRL's SFTTrainer runs activation
#: offloading and computes the loss in chunks (its fused LM head), which the Trainer's own files cannot.
TRL_TARGET = "trl"


@dataclass(frozen=True)
class Dimension:
    """One row of the table.

    Attributes:
        name: the ``Plan`` field (or, for :attr:`Role.RULE`, the setting a rule sets) and the :class:`Setting` value.
        role: what the search does with it.
        plan_field: a field of :class:`advisor.core.plan.Plan` (False: only a rule's setting).
        setting: a :class:`Setting` member (what rules speak of and a recommendation explains).
        flag: ``estimate`` and ``validate`` take it as a flag (help: the ``Plan`` field's description).
        metavar: the flag's metavar (counts); limit: its upper bound (counts; None: the largest global batch).
        estimate_default: what ``estimate`` prices when the flag is not given (None: the hardware's or the field's).
        multi_gpu: matters only on several GPUs (a one-GPU recommendation does not explain it).
        states: the model states read it (part of their memo key, :mod:`advisor.engine.states`).
        activations: the activations read it (part of their memo key, :mod:`advisor.engine.memory`).
        plan_line: the plan's one-line summary (``Plan.describe``) shows it, by its value or its absence.
        validate_flag: ``validate`` takes it as a flag too (a setting a trial can run at another value).
        workload: the question carries it (``Workload``'s field of the same name: a stack pin, the adapters' shape).
        handling: per consumer, what it does with a non-default value (absent: runs it).
    """

    name: str
    role: Role
    plan_field: bool = True
    flag: bool = True
    metavar: str | None = None
    limit: int | None = None
    estimate_default: Any = None
    multi_gpu: bool = False
    states: bool = True
    activations: bool = True
    plan_line: bool = False
    validate_flag: bool = False
    workload: bool = False
    handling: dict[Consumer, tuple[Handling, ...]] = field(default_factory=dict)

    @property
    def setting(self) -> bool:
        return self.role is not Role.MACHINE or self.name == "num_gpus"


_TRIAL_TP_PP = ("trials of tensor / pipeline parallel plans are not supported (they need Megatron-LM, DeepSpeed's "
                "pipeline engine or torch.distributed pipelining): validate a data-parallel plan")
_EMIT_TP_PP = ("--emit: the plan uses tensor parallel {tensor_parallel} x pipeline parallel {pipeline_parallel}, which "
               "--emit does not write (the Trainer runs TP through accelerate's ParallelismConfig, PP not at all); "
               "configure it from the plan")
_SIMULATE_ESTIMATE = "use the analytic estimate"
_D = Dimension
_R, _T, _S, _E = refuses, Consumer.TRIAL, Consumer.SIMULATE, Consumer.EMIT
_SELECTIVE = (Checkpointing.SELECTIVE_OP.value, Checkpointing.SELECTIVE_LAYER.value)
_CHECKPOINTING_ON = (("gradient_checkpointing", True),)
def _trial_label(parallelism: Parallelism) -> str:
    """How a torch.distributed trial runs a strategy: a ZeRO stage as the FSDP strategy of that stage, DDP as DDP."""
    if parallelism.deepspeed or parallelism.fsdp:
        return "FSDP " + next(p.spec.fsdp_strategy for p in Parallelism if p.fsdp and p.stage == parallelism.stage)
    return parallelism.value.upper()


_SHARED = tuple(p.value for p in Parallelism if p is not Parallelism.NONE)  #: several devices

#: The table, in the order a recommendation explains the searched settings, then the stack, then the rest. A
#: handling's reason is a ``str.format`` template over the plan's fields (``{expert_parallel}``).
DIMENSIONS: tuple[Dimension, ...] = (
    _D("method", Role.LAYOUT, validate_flag=True, plan_line=True),
    _D("precision", Role.LAYOUT, validate_flag=True, plan_line=True),
    _D("weights_dtype", Role.LAYOUT, validate_flag=True, plan_line=True),
    _D("tf32", Role.CROSSED, validate_flag=True, states=False, activations=False, plan_line=True),
    _D("optimizer", Role.CROSSED, validate_flag=True, estimate_default=Optimizer.ADAMW.value, activations=False,
       plan_line=True, handling={
        _S: tuple(_R(f"--simulate cannot run {o}: {o.spec.package}' kernels need a real CUDA device; use the analytic "
                     "estimate (without --simulate)", o.value) for o in Optimizer if o.spec.package)}),
    _D("gradient_checkpointing", Role.CROSSED, validate_flag=True, estimate_default=False, states=False,
       plan_line=True),
    _D("micro_batch_size", Role.BATCH, validate_flag=True, metavar="b", estimate_default=1, states=False,
       plan_line=True),
    _D("parallelism", Role.LAYOUT, validate_flag=True, handling={
        _T: tuple(swaps(spec.trial_as, f"{p} has no torch.distributed counterpart here: the trial runs "
                        f"{spec.trial_as} ({_trial_label(Parallelism.of(spec.trial_as))})", p.value)
                  for p, spec in PARALLELISM_SPECS.items() if spec.trial_as),
        _S: (_R("--simulate runs one device: drop --parallelism / use one GPU", *_SHARED),)}),
    _D("offload", Role.LAYOUT, estimate_default=Offload.NONE.value, multi_gpu=True),
    _D("tensor_parallel", Role.SPLIT, metavar="T", limit=MAX_GPUS_PER_NODE, estimate_default=1, multi_gpu=True,
       handling={_T: (_R(_TRIAL_TP_PP),), _E: (_R(_EMIT_TP_PP),)}),
    _D("pipeline_parallel", Role.SPLIT, metavar="P", limit=MAX_NODES, estimate_default=1, multi_gpu=True,
       handling={_T: (_R(_TRIAL_TP_PP),), _E: (_R(_EMIT_TP_PP),)}),
    _D("context_parallel", Role.SPLIT, metavar="C", limit=MAX_GPUS_PER_NODE, estimate_default=1, multi_gpu=True,
       states=False, handling={
        _T: (_R("trials of context-parallel plans are not supported (one sample's sequence over several GPUs): "
                "validate the plan with --context-parallel 1 at a shorter --seq-len"),),
        _S: (_R("--simulate runs one device: drop --context-parallel"),)}),
    _D("optimizer_in_backward", Role.LAYOUT, handling={
        _T: (_R("trials do not run the optimizer step in backward yet (estimate --simulate does): validate the plan "
                "without --optimizer-in-backward"),),
        _E: (swaps(False, "the emitted files step the optimizer after the backward pass: the Trainer has no option for "
                   "the step in backward (launch.sh says how torchtune's optimizer_in_bwd runs it)"),)}),
    _D("expert_parallel", Role.LAYOUT, metavar="E", multi_gpu=True, handling={
        _T: (_R("trials of expert-parallel plans are not supported (they need DeepSpeed-MoE or Megatron-Core): "
                "validate a plan with --expert-parallel 1"),),
        _E: (_R("--emit: the plan uses expert parallel {expert_parallel}, which the Trainer and accelerate cannot run; "
                "configure Megatron-Core (--expert-model-parallel-size {expert_parallel}) or DeepSpeed-MoE "
                "(deepspeed.moe.layer.MoE(..., ep_size={expert_parallel})) from the plan"),)}),
    _D("activation_offloading", Role.LAYOUT, validate_flag=True, states=False, handling={
        _E: (swaps(False, "the Trainer's files keep activations on the GPU (it has no option for activation "
                   "offloading): --emit trl writes TRL's SFTConfig(activation_offloading=True), which runs it",
                   runs_in=TRL_TARGET),),
        _S: (_R("--simulate counts the live tensors of one device and cannot see activation offloading's copies in "
                f"CPU RAM: {_SIMULATE_ESTIMATE}"),)}),
    _D("gradient_accumulation_steps", Role.BATCH, validate_flag=True, metavar="k", estimate_default=1, states=False,
       activations=False,
       plan_line=True),
    _D("attention", Role.STACK, validate_flag=True, workload=True, states=False),
    _D("loss_kernel", Role.STACK, validate_flag=True, workload=True, states=False, handling={
        _T: (_R("trials compute transformers' loss or Liger's fused one, not a chunked cross-entropy: validate the "
                f"plan with --loss-kernel {LossKernel.STANDARD} or {LossKernel.LIGER}", LossKernel.CHUNKED.value),),
        _E: (swaps(LossKernel.STANDARD.value, "the Trainer's files compute the standard loss (it has no chunked "
                   "cross-entropy): --emit trl writes TRL's SFTConfig, whose fused LM head computes it in chunks",
                   LossKernel.CHUNKED.value, runs_in=TRL_TARGET),)}),
    _D("torch_compile", Role.STACK, validate_flag=True, workload=True, states=False, handling={
        _S: (_R("--simulate runs the model eagerly on fake tensors, not compiled: add --no-torch-compile to compare "
                "like with like"),)}),
    _D("packing", Role.STACK, validate_flag=True, workload=True, states=False),
    _D("fp8", Role.STACK, validate_flag=True, workload=True, states=False, handling={
        _T: (_R("trials run the linear layers in 16 bits: they do not convert them to fp8 (torchao's "
                "convert_to_float8_training); validate the plan with --no-fp8"),)}),
    _D("lora_rank", Role.PRICED, validate_flag=True, workload=True, metavar="R", limit=MAX_WIDTH),
    _D("lora_targets", Role.PRICED, validate_flag=True, workload=True),
    _D("checkpointing", Role.PRICED, states=False, handling={
        _T: (_R("trials run the Trainer's full activation checkpointing, not {checkpointing}: validate a plan with "
                "full checkpointing (estimate --checkpointing full)", *_SELECTIVE, when=_CHECKPOINTING_ON),),
        _S: (_R("--simulate runs the Trainer's full activation checkpointing, not {checkpointing}: "
                f"{_SIMULATE_ESTIMATE}", *_SELECTIVE, when=_CHECKPOINTING_ON),)}),
    _D("legacy_bitsandbytes", Role.PRICED),
    _D("double_quant", Role.PRICED),
    _D("framework", Role.PRICED, handling={
        _T: tuple(_R(f"trials run transformers' model and the Trainer's loop, not {f.label}: validate a plan without "
                     "--framework", f.value) for f in Framework if f is not Framework.TRANSFORMERS),
        _S: tuple(_R(f"--simulate runs transformers' model, not {f.label}: use the analytic estimate"
                     + (" (benchmarks/litgpt_simulated.py simulates LitGPT's own step)" if f is Framework.LITGPT else ""),
                     f.value) for f in Framework if f is not Framework.TRANSFORMERS),
        _E: (_R("--emit writes the Trainer's recipe; the plan is priced for {framework}'s own code: configure it from "
                "the plan"),)}),
    _D("virtual_pipeline", Role.PRICED, metavar="V", limit=MAX_LAYERS),
    _D("async_tp", Role.PRICED, multi_gpu=True, states=False, activations=False),
    _D("fsdp_version", Role.PRICED, metavar="N", limit=2),
    _D("num_gpus", Role.MACHINE, flag=False, plan_line=True),
    _D("device", Role.MACHINE, flag=False),
    _D("cpu_processes", Role.MACHINE, flag=False),
    *(_D(name, Role.RULE, plan_field=False, flag=False) for name in (
        "optimizer_implementation", "dataloader_num_workers", "dataloader_pin_memory", "pad_to_multiple_of",
        "loss_scaling", "learning_rate", "num_train_epochs")),
)

BY_NAME: dict[str, Dimension] = {row.name: row for row in DIMENSIONS}


def _names(*roles: Role) -> tuple[str, ...]:
    return tuple(row.name for row in DIMENSIONS if row.role in roles)


#: Every setting a rule speaks about and a recommendation explains (``Recommendation.settings`` keys): the table's
#: rows but the machine's device and CPU processes.
Setting = Vocabulary("Setting", [(row.name.upper(), row.name) for row in DIMENSIONS if row.setting],
                     module=__name__)
Setting.__doc__ = "Every setting a rule speaks about and a recommendation explains (a row of the table each)."

#: The settings the planner searches, in the order a recommendation explains them.
SEARCHED: tuple[str, ...] = tuple(row.name for row in DIMENSIONS
                                  if row.role in (Role.LAYOUT, Role.SPLIT, Role.CROSSED)
                                  or row.name == "micro_batch_size")
#: The settings of a layout: what ``Rule.refuse`` decides on (with the tensor / pipeline split and the GPUs).
LAYOUT: tuple[str, ...] = _names(Role.LAYOUT)
#: The settings each legal layout is crossed with before the micro-batch: each combination is a group.
CROSSED: tuple[str, ...] = _names(Role.CROSSED)
#: The software-stack settings, settled per layout in this order; asked for with ``Workload``'s fields of the
#: same names.
STACK_SETTINGS: tuple[str, ...] = _names(Role.STACK)
#: The batch's settings: the micro-batch and the accumulation it implies.
BATCH: tuple[str, ...] = _names(Role.BATCH)
#: The model-parallel split: tensor and pipeline parallel.
SPLIT: tuple[str, ...] = _names(Role.SPLIT)
#: The adapters' shape: the priced settings the question carries (LoRA's rank and target layers).
ADAPTER_SHAPE: tuple[str, ...] = tuple(row.name for row in DIMENSIONS if row.workload and row.role is Role.PRICED)
#: The settings that matter only on several GPUs.
MULTI_GPU: tuple[str, ...] = tuple(row.name for row in DIMENSIONS if row.multi_gpu)
#: The plan settings ``estimate`` and ``validate`` take as flags.
PLAN_FLAGS: tuple[str, ...] = tuple(row.name for row in DIMENSIONS if row.flag)
#: ``estimate``'s defaults for the plan settings it is not told (precision, tf32 and parallelism follow the hardware).
ESTIMATE_DEFAULTS: dict[str, Any] = {row.name: row.estimate_default for row in DIMENSIONS
                                     if row.estimate_default is not None}
#: Plan fields the model states do not read (left out of their memo key).
NOT_STATES = frozenset(row.name for row in DIMENSIONS if row.plan_field and not row.states)
#: Plan fields the activations do not read (left out of their memo key).
NOT_ACTIVATIONS = frozenset(row.name for row in DIMENSIONS if row.plan_field and not row.activations)
#: The plan settings ``validate`` takes as flags (a subset of :data:`PLAN_FLAGS`).
VALIDATE_FLAGS: tuple[str, ...] = tuple(row.name for row in DIMENSIONS if row.validate_flag)
#: The plan settings the question carries (``Workload``'s fields of the same names).
WORKLOAD_SETTINGS: tuple[str, ...] = tuple(row.name for row in DIMENSIONS if row.workload)
#: The settings the plan's one-line summary shows (a card does not repeat them).
PLAN_LINE: tuple[str, ...] = tuple(row.name for row in DIMENSIONS if row.plan_line)


def plan_fields() -> tuple[str, ...]:
    """The rows that are ``Plan`` fields, in the table's order."""
    return tuple(row.name for row in DIMENSIONS if row.plan_field)


@lru_cache(maxsize=None)
def defaults(plan_type: type) -> dict[str, Any]:
    """Each plan field's default (pydantic ``model_fields``; required fields are left out)."""
    return {name: f.default for name, f in plan_type.model_fields.items() if not f.is_required()}


def handlings(consumer: Consumer, plan: Any) -> list[tuple[Dimension, Handling]]:
    """What ``consumer`` does with each of ``plan``'s values other than the defaults (rows in table order, the
    refusals and swaps only)."""
    fields = defaults(type(plan))
    out = []
    for row in DIMENSIONS:
        for handling in row.handling.get(consumer, ()):
            if row.plan_field and handling.applies(plan, row.name, fields.get(row.name, _REQUIRED)):
                out.append((row, handling))
                break
    return out


def refusal(consumer: Consumer, plan: Any) -> str | None:
    """Why ``consumer`` cannot run ``plan``: the reason of the first refused setting in the table's order, filled in
    with the plan's values (None: it runs every setting, perhaps after swaps)."""
    found = next((h for _, h in handlings(consumer, plan) if h.verdict is Verdict.REFUSES), None)
    return None if found is None else found.reason.format(**dict(plan))


def refused_values(consumer: Consumer, name: str, values: list[Any], fields: dict[str, Any]) -> list[tuple[Any, str]]:
    """``(value, reason)`` for each of ``values`` of the setting ``name`` that ``consumer`` refuses whatever the other
    settings (``fields``: the plan's defaults, which the reason is filled in with): what a search for a plan it must
    run leaves out (a refusal with a ``when`` condition is judged on the whole plan, by :func:`refusal`)."""
    row = BY_NAME.get(name)
    handled = row.handling.get(consumer, ()) if row else ()
    refusals = [h for h in handled if h.verdict is Verdict.REFUSES and not h.when]
    out = []
    for v in values:
        found = next((h for h in refusals if h.values is None or v in h.values), None)
        if v != fields.get(name, _REQUIRED) and found is not None:
            out.append((v, found.reason.format(**{**fields, name: v})))
    return out


def runs_only_in(consumer: Consumer, plan: Any) -> dict[str, list[str]]:
    """The targets that alone run some of ``plan``'s values as priced (a swap's ``runs_in``), each with those
    settings (``{}``: none, every target runs what it runs)."""
    out: dict[str, list[str]] = {}
    for row, h in handlings(consumer, plan):
        if h.verdict is Verdict.SWAPS and h.runs_in:
            out.setdefault(h.runs_in, []).append(row.name)
    return out


def swapped(consumer: Consumer, plan: Any, target: str | None = None) -> tuple[Any, list[str]]:
    """``plan`` with ``consumer``'s swaps applied (``model_copy``), and their notes; with ``target``, only the swaps
    that target makes (not those it runs: :attr:`Handling.runs_in`)."""
    swaps_ = [(row, h) for row, h in handlings(consumer, plan)
              if h.verdict is Verdict.SWAPS and (target is None or h.runs_in != target)]
    if not swaps_:
        return plan, []
    return plan.model_copy(update={row.name: h.to for row, h in swaps_}), [h.reason for _, h in swaps_]


_REQUIRED = object()  #: a required field has no default: every value counts as given


def markdown() -> str:
    """The table as docs/ARCHITECTURE.md shows it (``tests/core/test_dimensions.py`` keeps the two the same): a line
    per row with its role, flag, multi-GPU, the cost caches that read it, and what the trial, the simulation and
    ``--emit`` do with a value other than the default (``-``: run it)."""
    def handled(row: Dimension, consumer: Consumer) -> str:
        refused = [h for h in row.handling.get(consumer, ()) if h.verdict is Verdict.REFUSES]
        words = [f"refuses {'/'.join(str(v) for h in refused for v in h.values)}" if all(h.values for h in refused)
                 else "refuses any"] if refused else []
        words += [f"swaps {'/'.join(map(str, h.values)) if h.values else 'any'} → {h.to}"
                  + (f" ({h.runs_in} runs it)" if h.runs_in else "")
                  for h in row.handling.get(consumer, ()) if h.verdict is Verdict.SWAPS]
        return "; ".join(words) or "-"

    lines = ["| setting | role | flag | multi-GPU | states / activations read it | trial | simulate | emit |",
             "|---|---|---|---|---|---|---|---|"]
    for row in DIMENSIONS:
        flag = ("estimate, validate" if row.validate_flag else "estimate") if row.flag else "-"
        reads = "/".join(w for w, on in (("states", row.states), ("activations", row.activations)) if on)
        lines.append(f"| {row.name} | {row.role} | {flag} | {'yes' if row.multi_gpu else '-'} | "
                     f"{reads if row.plan_field and reads else '-'} | {handled(row, Consumer.TRIAL)} | "
                     f"{handled(row, Consumer.SIMULATE)} | {handled(row, Consumer.EMIT)} |")
    return "\n".join(lines) + "\n"

