"""The planner: enumerate candidate plans, keep what the rules allow and memory admits, rank.

Search space: method × precision × weights dtype × tf32 × optimizer × activation checkpointing × micro-batch
(divisors of the per-device batch, so gradient accumulation is a whole number) × parallelism × offload ×
tensor / pipeline / expert parallel × the optimizer step in backward (at accumulation 1 only) × activation
offloading.
Rules forbid values, mark others as fallbacks with a penalty (used only when nothing without
them fits), or prefer values. A plan fits when its ``device_bytes`` stays under capacity less
the safety margin. Ranking ('speed' objective): least total fallback penalty, then highest estimated tokens/s, then
most preferences met; the 'memory' objective takes the least device memory within :data:`MEMORY_SPEED_TOLERANCE`
of the fastest plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import product
from typing import Any

from advisor.engine.memory import CUDA_CONTEXT_BYTES, MemoryEstimate, estimate_memory
from advisor.engine.speed import SpeedEstimate, estimate_speed
from probes.errors import UsageError
from probes.kernels import Attention, LossKernel
from probes.limits import divisors
from probes.vocabulary import (Device, Method, Objective, Offload, Optimizer, Parallelism, Penalty, Precision,
                               Setting, WeightsDtype, searched, values)
from rules import Effect, Facts, Plan
from rules.base import Rule
from rules.experts import expert_parallel_degrees
from rules.stack import installed_legacy_bitsandbytes

# the legality checks, also reached as planner.check_plan / planner.require_legal by the app
from advisor.engine.legality import (_refusing_rules, check_effects, check_plan, propose_effects,  # noqa: F401,E402
                                     refusal, require_legal, require_runnable_pins, with_stack)

SAFETY_MARGIN_GPU = 0.10  #: fraction of GPU memory kept free (fragmentation, other processes)
SAFETY_MARGIN_CPU = 0.25  #: fraction of RAM kept for the OS, the data pipeline and other programs

#: The settings the planner searches (the rest are set by rules).
SEARCHED = (Setting.METHOD, Setting.PRECISION, Setting.WEIGHTS_DTYPE, Setting.TF32, Setting.OPTIMIZER,
            Setting.GRADIENT_CHECKPOINTING, Setting.MICRO_BATCH_SIZE, Setting.PARALLELISM, Setting.OFFLOAD,
            Setting.TENSOR_PARALLEL, Setting.PIPELINE_PARALLEL, Setting.OPTIMIZER_IN_BACKWARD, Setting.EXPERT_PARALLEL,
            Setting.ACTIVATION_OFFLOADING)


@dataclass
class Candidate:
    """One evaluated plan."""

    plan: Plan
    memory: MemoryEstimate
    speed: SpeedEstimate
    penalty: int
    preferences: int
    fallbacks: list[Effect] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.memory.fits

    def key(self) -> tuple:
        """Sort key for the 'speed' objective: best first."""
        return (self.penalty, -self.speed.tokens_per_s, -self.preferences)

    def memory_key(self) -> tuple:
        """Sort key among the plans the 'memory' objective may pick: least device memory first, then as ``key``."""
        return (self.memory.device_bytes, *self.key())


#: The 'memory' objective's speed tolerance: it takes the least device memory among the plans that fit within 10 %
#: of the fastest plan's tokens/s and pay no fallback the fastest plan does not pay (no checkpointing, Adafactor,
#: adapters or offload that speed did not need). A stated trade, not a fit: memory saved below that costs more time
#: than a user who asked for headroom, not for a slower run, would accept.
MEMORY_SPEED_TOLERANCE = 0.10


def order(fitting: list[Candidate], objective: str) -> list[Candidate]:
    """The plans that fit, best first under ``objective``: 'speed' by :meth:`Candidate.key`; 'memory' the plans
    within :data:`MEMORY_SPEED_TOLERANCE` of the fastest (at its penalty) by least memory, then the others."""
    by_speed = sorted(fitting, key=Candidate.key)
    if objective != Objective.MEMORY or not by_speed:
        return by_speed
    fastest = by_speed[0]
    floor = (1 - MEMORY_SPEED_TOLERANCE) * fastest.speed.tokens_per_s
    near = [c for c in by_speed if c.penalty <= fastest.penalty and c.speed.tokens_per_s >= floor]
    rest = [c for c in by_speed if not (c.penalty <= fastest.penalty and c.speed.tokens_per_s >= floor)]
    return sorted(near, key=Candidate.memory_key) + rest


@dataclass
class LayoutLog:
    """What the search learnt of the layouts (:data:`LAYOUT` with the tensor / pipeline split): the (setting, value)
    pairs some legal layout had, and for the others a rule's refusal, so an explanation can tell a value no layout
    could take (and why) from one that was not needed."""

    legal: set[tuple[str, Any]] = field(default_factory=set)
    refused: dict[tuple[str, Any], Effect] = field(default_factory=dict)

    def refusal_of(self, setting: str, value: Any) -> Effect | None:
        """The refusal that kept every layout from ``setting = value``, or None (some layout had it, or none was
        tried)."""
        return None if (setting, value) in self.legal else self.refused.get((setting, value))


@dataclass
class PlanningResult:
    """Everything the planner decided, for the recommendation and its explanation."""

    facts: Facts
    best: Candidate | None
    candidates: list[Candidate]
    domains: dict[str, list[Any]]
    effects: list[Effect]  #: propose-phase effects of every rule
    check_effects: list[Effect]  #: check-phase effects on the chosen plan
    layouts: LayoutLog = field(default_factory=LayoutLog)  #: the legal and refused layout values

    @property
    def fitting(self) -> list[Candidate]:
        return order([c for c in self.candidates if c.fits], self.facts.workload.objective)


def capacity_bytes(facts: Facts) -> int:
    """Memory a plan may use on one device: GPU memory, or host RAM when training on the CPU."""
    if facts.gpu is not None:
        return facts.gpu.memory_total_bytes
    host = facts.hardware.host
    return host.ram_bytes if host and host.ram_bytes else 0




def domains(facts: Facts) -> dict[str, list[Any]]:
    """Every value each searched setting could take before the rules speak.

    Raises:
        UsageError: the global batch is not divisible by the number of GPUs.
    """
    gpus = facts.hardware.num_gpus
    dp = max(gpus, 1)
    gbs = facts.workload.global_batch_size
    if gbs % dp:
        raise UsageError(f"global batch size {gbs} is not divisible by {dp} GPUs: use a multiple of {dp}")
    return {
        Setting.METHOD: list(searched(Method)),
        Setting.PRECISION: list(searched(Precision)),
        Setting.WEIGHTS_DTYPE: list(searched(WeightsDtype)),
        Setting.TF32: [True, False],
        Setting.OPTIMIZER: list(searched(Optimizer)),
        Setting.GRADIENT_CHECKPOINTING: [False, True],
        Setting.MICRO_BATCH_SIZE: divisors(gbs // dp),
        Setting.PARALLELISM: list(values(Parallelism)),
        Setting.OFFLOAD: list(values(Offload)),
        Setting.TENSOR_PARALLEL: [t for t in (1, 2, 4, 8) if t <= max(len(facts.hardware.gpus), 1)],
        Setting.PIPELINE_PARALLEL: [1] + ([facts.hardware.nodes] if facts.hardware.nodes > 1 else []),
        # the stack, best value first (:func:`_with_stack` takes the first one a layout can run)
        Setting.ATTENTION: list(values(Attention)),
        Setting.LOSS_KERNEL: [LossKernel.LIGER.value, LossKernel.CHUNKED.value, LossKernel.STANDARD.value],
        Setting.TORCH_COMPILE: [True, False],
        Setting.PACKING: [True, False],
        Setting.FP8: [True, False],
        Setting.OPTIMIZER_IN_BACKWARD: [False, True],
        Setting.ACTIVATION_OFFLOADING: [False, True],
        Setting.EXPERT_PARALLEL: [1] + expert_parallel_degrees(facts.model, gpus),
    }


def _allowed(domain: dict[str, list[Any]], effects: list[Effect]) -> dict[str, list[Any]]:
    allowed = {}
    for setting, choices in domain.items():
        allowed[setting] = [v for v in choices
                            if not any(e.kind == "forbid" and e.setting == setting and e.matches(v) for e in effects)]
    return allowed


@dataclass(frozen=True)
class Pricing:
    """What pricing a plan reads from the facts and the rules, worked out once per search (the planner
    prices thousands of plans): capacity (bytes), links, the network (bytes/s) and the effects that rank."""

    capacity_bytes: int
    host_capacity_bytes: int | None
    cuda_context_bytes: int
    nvlink: bool
    inter_node_bytes_per_s: float
    fallbacks: tuple[Effect, ...]
    preferences: tuple[Effect, ...]

    @classmethod
    def of(cls, facts: Facts, effects: list[Effect]) -> Pricing:
        return cls(capacity_bytes=capacity_bytes(facts), host_capacity_bytes=facts.hardware.host_memory,
                   cuda_context_bytes=facts.hardware.cuda_context_bytes or CUDA_CONTEXT_BYTES,
                   nvlink=facts.hardware.nvlink_ring,
                   inter_node_bytes_per_s=facts.hardware.inter_node_bytes_per_s,
                   fallbacks=tuple(e for e in effects if e.kind == "fallback" and e.setting in Plan.model_fields),
                   preferences=tuple(e for e in effects if e.kind == "prefer" and e.setting in Plan.model_fields))


def evaluate(facts: Facts, plan: Plan, effects: list[Effect] | None = None, pricing: Pricing | None = None
             ) -> Candidate:
    """Memory, speed, penalty and preferences of one plan (``pricing``: :class:`Pricing` of the facts and
    effects, when the caller prices many plans)."""
    if pricing is None:
        pricing = Pricing.of(facts, effects if effects is not None else propose_effects(facts))
    margin = SAFETY_MARGIN_GPU if plan.device == Device.CUDA else SAFETY_MARGIN_CPU
    hw = facts.hardware
    memory = estimate_memory(facts.model, plan, facts.workload.seq_len, pricing.capacity_bytes, margin, nodes=hw.nodes,
                             host_capacity_bytes=pricing.host_capacity_bytes,
                             cuda_context_bytes=pricing.cuda_context_bytes)
    speed = estimate_speed(facts.model, plan, facts.workload.seq_len, memory, facts.gpu, hw.host,
                           nvlink=pricing.nvlink, nodes=hw.nodes, inter_node_bytes_per_s=pricing.inter_node_bytes_per_s,
                           mean_sample_len=facts.workload.mean_sample_len)
    values = plan.__dict__
    fallbacks = [e for e in pricing.fallbacks if e.matches(values[e.setting]) and (not e.when or e.applies(values))]
    prefs = sum(1 for e in pricing.preferences if e.matches(values[e.setting]) and (not e.when or e.applies(values)))
    return Candidate(plan=plan, memory=memory, speed=speed, penalty=sum(e.penalty for e in fallbacks),
                     preferences=prefs, fallbacks=fallbacks)


#: The settings of a layout: what ``Rule.refuse`` decides on (with the tensor / pipeline split and the GPUs; the
#: step in backward also needs accumulation 1, which :func:`_micro_batches` keeps to).
LAYOUT = (Setting.METHOD, Setting.PRECISION, Setting.WEIGHTS_DTYPE, Setting.OPTIMIZER_IN_BACKWARD,
          Setting.ACTIVATION_OFFLOADING, Setting.EXPERT_PARALLEL, Setting.PARALLELISM, Setting.OFFLOAD)


def _layouts(facts: Facts, plan: Plan, allowed: dict[str, list[Any]], strategies: list[str], refusing: list[Rule],
             log: LayoutLog | None = None) -> list[tuple[Any, ...]]:
    """The (method, precision, weights dtype, step in backward, activation offloading, expert parallel, parallelism,
    offload) tuples no rule
    refuses for ``plan``'s tensor / pipeline split and GPUs (``Rule.refuse`` decides on the layout alone, at
    accumulation 1, so one plan per tuple stands for all its candidates)."""
    choices = [allowed[s] for s in LAYOUT[:-2]] + [strategies, allowed[Setting.OFFLOAD]]
    plan = plan.model_copy(update={Setting.GRADIENT_ACCUMULATION_STEPS: 1})
    log = log if log is not None else LayoutLog()
    split = ((Setting.TENSOR_PARALLEL, plan.tensor_parallel), (Setting.PIPELINE_PARALLEL, plan.pipeline_parallel))
    legal = []
    for combo in product(*choices):
        values = dict(zip(LAYOUT, combo))
        refused = refusal(facts, plan.model_copy(update=values), refusing, layout_only=True)
        if refused is None:
            legal.append(combo)
            log.legal.update([*values.items(), *split])
        else:
            value = values.get(refused.setting, dict(split).get(refused.setting))
            log.refused.setdefault((refused.setting, value), refused)
    return legal


def _twin(plan: Plan) -> tuple:
    """A plan's settings with activation offloading off: the key of the plan it would spare (:func:`_micro_batches`)."""
    return tuple((k, v) for k, v in plan.__dict__.items() if k != Setting.ACTIVATION_OFFLOADING)


def _micro_batches(facts: Facts, plan: Plan, micros: list[int], per_replica: int, pricing: Pricing,
                   spared: set[tuple] = frozenset()) -> list[Candidate]:
    """``plan`` at each micro-batch of ``micros`` (ascending), with the accumulation that keeps the global batch.

    An activation-offloading candidate whose twin without offloading fits (``spared``: :func:`_twin` keys) is not
    priced: it pays a fallback more for the same plan, no faster, so it can win under neither objective.

    Memory grows with the micro-batch while gradients accumulate, so once one does not fit the larger ones
    with accumulation cannot either: they are skipped (the explanations and suggestions read only plans that fit
    and the smallest plan of a value). The micro-batch without accumulation is always priced: it holds no
    gradients through the backward pass, so it can fit where smaller ones with accumulation do not."""
    out = []
    overflow = False
    for micro in micros:
        steps = per_replica // micro
        if (overflow or plan.optimizer_in_backward) and steps > 1:  # the step in backward cannot accumulate
            continue
        sized = plan.model_copy(update={Setting.MICRO_BATCH_SIZE: micro, Setting.GRADIENT_ACCUMULATION_STEPS: steps})
        if spared and plan.activation_offloading and _twin(sized) in spared:
            continue
        candidate = evaluate(facts, sized, pricing=pricing)
        overflow = overflow or not candidate.fits
        out.append(candidate)
    return out


def _layout_penalty(pricing: Pricing, values: dict[str, Any]) -> int:
    """The fallback penalty a layout's own settings carry (every candidate of the layout pays at least this: a fallback
    whose ``when`` reads a setting outside the layout, such as checkpointing, may not apply to all of them)."""
    return sum(e.penalty for e in pricing.fallbacks
               if e.setting in LAYOUT and all(k in LAYOUT for k in e.when or {}) and e.applies(values))


def _candidates(facts: Facts, allowed: dict[str, list[Any]], effects: list[Effect], model_parallel: bool,
                bound: int | None = None, log: LayoutLog | None = None) -> list[Candidate]:
    """Every allowed plan that could win, with (``model_parallel``) or without tensor / pipeline parallelism.

    With model parallelism the data-parallel size is GPUs / (t·p): its micro-batches divide the
    larger per-replica batch, and a single replica (t·p = GPUs) runs without a data-parallel wrapper.

    Layouts whose own penalty reaches :attr:`Penalty.ADAPTERS` (adapters, offload), and those that offload
    activations (a fallback whatever its rung, and the costliest layouts to price), are priced last, cheapest
    first, and under the 'speed' objective only while they could still win: not once a plan that fits pays less
    than they do (``bound``: the least penalty of a fitting plan found before this call).
    """
    device = Device.CPU if facts.gpu is None else Device.CUDA
    gpus = facts.hardware.num_gpus
    gbs = facts.workload.global_batch_size
    refusing = _refusing_rules()
    pricing = Pricing.of(facts, effects)
    light: list[tuple[Plan, list[int], int]] = []
    heavy: list[tuple[int, int, Plan, list[int], int]] = []
    for tp, pp in product(allowed[Setting.TENSOR_PARALLEL], allowed[Setting.PIPELINE_PARALLEL]):
        if (tp * pp > 1) != model_parallel or (gpus and gpus % (tp * pp)):
            continue
        dp = max(gpus // (tp * pp), 1) if gpus else 1
        if gbs % dp:
            continue
        if model_parallel:
            micros = _allowed({Setting.MICRO_BATCH_SIZE: divisors(gbs // dp)}, effects)[Setting.MICRO_BATCH_SIZE]
            strategies = ([Parallelism.NONE.value] if dp == 1
                          else [p for p in allowed[Setting.PARALLELISM] if p != Parallelism.NONE])
        else:
            micros, strategies = allowed[Setting.MICRO_BATCH_SIZE], allowed[Setting.PARALLELISM]
        if not all((micros, strategies, allowed[Setting.PRECISION], allowed[Setting.OPTIMIZER],
                    allowed[Setting.METHOD], allowed[Setting.WEIGHTS_DTYPE])):
            continue
        w = facts.workload
        layout = Plan(device=device, precision=allowed[Setting.PRECISION][0], tf32=False,
                      optimizer=allowed[Setting.OPTIMIZER][0], gradient_checkpointing=False, micro_batch_size=micros[0],
                      gradient_accumulation_steps=gbs // (micros[0] * dp), num_gpus=gpus, tensor_parallel=tp,
                      pipeline_parallel=pp, parallelism=strategies[0], lora_rank=w.lora_rank,
                      lora_targets=w.lora_targets, legacy_bitsandbytes=installed_legacy_bitsandbytes(facts))
        for combo in _layouts(facts, layout, allowed, strategies, refusing, log):
            plan = with_stack(facts, layout.model_copy(update=dict(zip(LAYOUT, combo))), allowed, refusing)
            if plan is None:
                continue
            penalty = _layout_penalty(pricing, plan.__dict__)
            if penalty < Penalty.ADAPTERS and not plan.activation_offloading:
                light.append((plan, micros, gbs // dp))
            else:
                heavy.append((penalty, len(heavy), plan, micros, gbs // dp))
    out = [c for plan, micros, per_replica in light for c in _layout_candidates(facts, plan, allowed, micros,
                                                                                per_replica, pricing)]
    return _heavy_candidates(facts, heavy, out, allowed, pricing, bound)


def _heavy_candidates(facts: Facts, heavy: list[tuple[int, int, Plan, list[int], int]], out: list[Candidate],
                      allowed: dict[str, list[Any]], pricing: Pricing, bound: int | None) -> list[Candidate]:
    """``out`` (the light layouts' candidates) and the heavy layouts' (``(penalty, order, layout, micro-batches,
    per-replica batch)``), cheapest first while they could still win (:func:`_candidates`)."""
    speed = facts.workload.objective == Objective.SPEED
    spared = {_twin(c.plan) for c in out if c.fits}
    for penalty, _, plan, micros, per_replica in sorted(heavy, key=lambda h: h[:2]):
        least = min([c.penalty for c in out if c.fits] + ([bound] if bound is not None else []), default=None)
        if speed and least is not None and least < penalty:
            break
        priced = _layout_candidates(facts, plan, allowed, micros, per_replica, pricing, spared)
        spared.update(_twin(c.plan) for c in priced if c.fits and not c.plan.activation_offloading)
        out += priced
    return out


def _layout_candidates(facts: Facts, layout: Plan, allowed: dict[str, list[Any]], micros: list[int],
                       per_replica: int, pricing: Pricing, spared: set[tuple] = frozenset()) -> list[Candidate]:
    """Every candidate of one layout: tf32 x optimizer x checkpointing x micro-batch."""
    out = []
    for tf32, optimizer, ckpt in product(allowed[Setting.TF32], allowed[Setting.OPTIMIZER],
                                         allowed[Setting.GRADIENT_CHECKPOINTING]):
        out += _micro_batches(facts, layout.model_copy(update={
            Setting.TF32: tf32, Setting.OPTIMIZER: optimizer, Setting.GRADIENT_CHECKPOINTING: ckpt}),
            micros, per_replica, pricing, spared)
    return out


def search(facts: Facts) -> PlanningResult:
    """Evaluate every allowed candidate and pick the best that fits (``best`` is None if none fits).

    Tensor and pipeline parallel plans are evaluated only when they could win: under the 'speed'
    objective, when no plan without them fits at a lower fallback penalty than theirs (the rules make
    model parallelism a fallback: Narayanan et al. 2021, takeaways 1-2).
    """
    effects = propose_effects(facts)
    domain = domains(facts)
    allowed = _allowed(domain, effects)
    log = LayoutLog()
    candidates = _candidates(facts, allowed, effects, model_parallel=False, log=log)
    fitting = order([c for c in candidates if c.fits], facts.workload.objective)
    mp_penalty = min((e.penalty for e in effects if e.kind == "fallback"
                      and e.setting in (Setting.TENSOR_PARALLEL, Setting.PIPELINE_PARALLEL)), default=0)
    mp_possible = len(allowed[Setting.TENSOR_PARALLEL]) > 1 or len(allowed[Setting.PIPELINE_PARALLEL]) > 1
    if mp_possible and (facts.workload.objective == Objective.MEMORY or not fitting or fitting[0].penalty >= mp_penalty):
        candidates += _candidates(facts, allowed, effects, model_parallel=True,
                                  bound=fitting[0].penalty if fitting else None, log=log)
        fitting = order([c for c in candidates if c.fits], facts.workload.objective)
    best = fitting[0] if fitting else None
    checks = check_effects(facts, best.plan) if best else []
    return PlanningResult(facts=facts, best=best, candidates=candidates, domains=domain, effects=effects,
                          check_effects=checks, layouts=log)
