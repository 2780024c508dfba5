"""The planner: enumerate candidate plans, keep what the rules allow and memory admits, rank.

Search space: method × precision × weights dtype × tf32 × optimizer × activation checkpointing × micro-batch
(divisors of the per-device batch, so gradient accumulation is a whole number) × parallelism × offload ×
tensor / pipeline / expert parallel × the optimizer step in backward (at accumulation 1 only) × activation
offloading.
Rules forbid values, mark others as fallbacks with a penalty (used only when nothing without
them fits), or prefer values. A plan fits when its ``device_bytes`` stays under capacity less
the safety margin. Ranking ('speed' objective): least total fallback penalty, then the fewest risky fallbacks
(``Penalty.RISKY``), then highest estimated tokens/s, then most preferences met; the 'memory' objective takes the
least device memory within :data:`MEMORY_SPEED_TOLERANCE` of the fastest plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import product
from typing import Any

from advisor.engine.candidates import Candidate, Pricing, evaluate, nothing_fits, order, safety_margin
from advisor.engine.allocator import device_floor_bytes
from advisor.engine.groups import groups_in_order, within
from advisor.engine.method_policy import weigh_method
from probes.checkpoint import planned_double_quant
from advisor.core.errors import UsageError
from advisor.core.kernels import Attention, LossKernel
from advisor.core.limits import divisors
from advisor.core.vocabulary import (Device, Method, Objective, Offload, Optimizer, Parallelism, Penalty, Precision,
                                   WeightsDtype, searched, values)
from advisor.core.dimensions import CROSSED, Consumer, LAYOUT, SPLIT, Setting
from rules import Effect, Facts, Plan
from rules.base import Rule
from rules.experts import expert_parallel_degrees
from rules.stack import installed_legacy_bitsandbytes

# the legality checks, also reached as planner.check_plan / planner.require_legal by the app
from advisor.engine.legality import (_refusing_rules, allowed_values, capability_forbids,  # noqa: F401,E402
                                     check_effects, check_plan, propose_effects,
                                     refusal, require_legal, require_runnable_pins, with_stack)




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
    weighed: list[Effect] = field(default_factory=list)
    """the effects with which ``--method auto`` chose adapters over full fine-tuning (:mod:`method_policy`), or []"""

    @property
    def fitting(self) -> list[Candidate]:
        return order([c for c in self.candidates if c.fits], self.facts.workload.objective)


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
        Setting.CONTEXT_PARALLEL: [c for c in (1, 2, 4, 8) if c <= max(len(facts.hardware.gpus), 1)],
        # the stack, best value first (:func:`_with_stack` takes the first one a layout can run)
        Setting.ATTENTION: list(values(Attention)),
        Setting.LOSS_KERNEL: [LossKernel.LIGER.value, LossKernel.CHUNKED.value, LossKernel.LIGER_LAYERS.value,
                              LossKernel.STANDARD.value],
        Setting.TORCH_COMPILE: [True, False],
        Setting.PACKING: [True, False],
        Setting.FP8: [True, False],
        Setting.OPTIMIZER_IN_BACKWARD: [False, True],
        Setting.ACTIVATION_OFFLOADING: [False, True],
        Setting.EXPERT_PARALLEL: [1] + expert_parallel_degrees(facts.model, gpus),
    }





def _layouts(facts: Facts, plan: Plan, allowed: dict[str, list[Any]], strategies: list[str], refusing: list[Rule],
             log: LayoutLog | None = None) -> list[tuple[Any, ...]]:
    """The (method, precision, weights dtype, step in backward, activation offloading, expert parallel, parallelism,
    offload) tuples no rule
    refuses for ``plan``'s tensor / pipeline split and GPUs (``Rule.refuse`` decides on the layout alone, at
    accumulation 1, so one plan per tuple stands for all its candidates)."""
    choices = [strategies if s == Setting.PARALLELISM else allowed[s] for s in LAYOUT]
    plan = plan.model_copy(update={Setting.GRADIENT_ACCUMULATION_STEPS: 1})
    log = log if log is not None else LayoutLog()
    key = (id(facts.model), id(facts.hardware), tuple(plan.__dict__.values()), *map(tuple, choices), *map(id, refusing))
    hit = _LAYOUTS.get(key)
    if hit is None or hit[0] is not facts.model or hit[1] is not facts.hardware:
        if len(_LAYOUTS) >= _LAYOUTS_ENTRIES:
            _LAYOUTS.clear()
        hit = _LAYOUTS[key] = (facts.model, facts.hardware, *_settle(facts, plan, choices, refusing))
    legal, pairs, refused = hit[2:]
    log.legal.update(pairs)
    for setting_value, effect in refused:
        log.refused.setdefault(setting_value, effect)
    return legal


#: Layouts settled before (:func:`_settle`), by model, hardware, the layout's other settings and the values tried: the
#: rules' ``refuse`` reads nothing else of the facts (a test checks that none reads the workload), so the searches of
#: other stack values and methods that explain a recommendation reuse the first search's. Each entry keeps its model
#: and hardware alive, so their ``id`` in the key cannot be reused by another object.
_LAYOUTS: dict[tuple, tuple] = {}
_LAYOUTS_ENTRIES = 256


def _settle(facts: Facts, plan: Plan, choices: list[list[Any]], refusing: list[Rule]
            ) -> tuple[list[tuple[Any, ...]], set[tuple[str, Any]], list[tuple[tuple[str, Any], Effect]]]:
    """(the legal layout tuples, the (setting, value) pairs they hold with the tensor / pipeline split, each refused
    (setting, value) with the refusal, in order) of :func:`_layouts`."""
    split = ((Setting.TENSOR_PARALLEL, plan.tensor_parallel), (Setting.PIPELINE_PARALLEL, plan.pipeline_parallel),
             (Setting.CONTEXT_PARALLEL, plan.context_parallel))
    legal, pairs, refused = [], set(split), []
    for combo in product(*choices):
        values = dict(zip(LAYOUT, combo))
        effect = refusal(facts, plan.model_copy(update=values), refusing, layout_only=True)
        if effect is None:
            legal.append(combo)
            pairs.update(values.items())
        else:
            refused.append(((effect.setting, values.get(effect.setting, dict(split).get(effect.setting))), effect))
    return legal, (pairs if legal else set()), refused


def _twin(plan: Plan) -> tuple:
    """A plan's settings with activation offloading off: the key of the plan it would spare (:func:`_micro_batches`)."""
    return tuple({**plan.__dict__, Setting.ACTIVATION_OFFLOADING.value: False}.values())


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
    return sum(e.penalty for e in pricing.fallbacks if within(e, LAYOUT) and e.applies(values))


def _candidates(facts: Facts, allowed: dict[str, list[Any]], effects: list[Effect], model_parallel: bool,
                bound: int | None = None, log: LayoutLog | None = None, best_only: bool = False,
                risky_bound: int | None = None, closest: bool = True) -> list[Candidate]:
    """Every allowed plan that could win, with (``model_parallel``) or without tensor / pipeline parallelism.

    With model parallelism the data-parallel size is GPUs / (t·p): its micro-batches divide the
    larger per-replica batch, and a single replica (t·p = GPUs) runs without a data-parallel wrapper.

    Layouts whose own penalty reaches :attr:`Penalty.ADAPTERS` (adapters, offload), and those that offload
    activations (a fallback whatever its rung, and the costliest layouts to price), are priced last, cheapest
    first, and under the 'speed' objective only while they could still win: not once a plan that fits pays less
    than they do (``bound``: the least penalty of a fitting plan found before this call; ``risky_bound``: the fewest
    risky fallbacks of a fitting plan at that penalty). ``best_only``: only the
    candidates that could be the best plan (:func:`_best_candidates`; ``closest``: its groups that cannot fit too).
    """
    device = Device.CPU if facts.gpu is None else Device.CUDA
    gpus = facts.hardware.num_gpus
    gbs = facts.workload.global_batch_size
    refusing = _refusing_rules()
    pricing = Pricing.of(facts, effects)
    light: list[tuple[Plan, list[int], int]] = []
    heavy: list[tuple[int, int, Plan, list[int], int]] = []
    for tp, pp, cp in product(*(allowed[s] for s in SPLIT)):
        if (tp * pp * cp > 1) != model_parallel or (gpus and gpus % (tp * pp * cp)):
            continue
        dp = max(gpus // (tp * pp * cp), 1) if gpus else 1
        if gbs % dp:
            continue
        if model_parallel:  # a data-parallel wrapper over the GPUs that hold the same weights (dp x cp)
            micros = allowed_values({Setting.MICRO_BATCH_SIZE: divisors(gbs // dp)}, effects)[Setting.MICRO_BATCH_SIZE]
            strategies = ([Parallelism.NONE.value] if dp * cp == 1
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
                      pipeline_parallel=pp, context_parallel=cp, parallelism=strategies[0], lora_rank=w.lora_rank,
                      lora_targets=w.lora_targets, legacy_bitsandbytes=installed_legacy_bitsandbytes(facts),
                      double_quant=planned_double_quant(facts.model.quantization))
        for combo in _layouts(facts, layout, allowed, strategies, refusing, log):
            plan = with_stack(facts, layout.model_copy(update=dict(zip(LAYOUT, combo))), allowed, refusing)
            if plan is None:
                continue
            penalty = _layout_penalty(pricing, plan.__dict__)
            if penalty < Penalty.ADAPTERS and not plan.activation_offloading:
                light.append((plan, micros, gbs // dp))
            else:
                heavy.append((penalty, len(heavy), plan, micros, gbs // dp))
    if best_only:
        ranked = light + [h[2:] for h in sorted(heavy, key=lambda h: h[:2])]
        return _best_candidates(facts, ranked, allowed, pricing, bound, risky_bound, closest)
    out = [c for plan, micros, per_replica in light for c in _layout_candidates(facts, plan, allowed, micros,
                                                                                per_replica, pricing)]
    return _heavy_candidates(facts, heavy, out, allowed, pricing, bound)


#: A fitting plan's risky count where it does not rank (the 'memory' objective, or no count known): above any
#: group's, so only the penalty prunes.
_UNRANKED = float("inf")


def _best_candidates(facts: Facts, layouts: list[tuple[Plan, list[int], int]], allowed: dict[str, list[Any]],
                     pricing: Pricing, bound: int | None, risky_bound: int | None = None,
                     closest: bool = True) -> list[Candidate]:
    """The candidates that could be the best plan, in the order the full search prices them (``layouts``: light, then
    heavy cheapest first, as ``(layout, micro-batches, per-replica batch)``), so the same plan wins, ties included.

    Each layout's groups (:data:`CROSSED`: tf32 × optimizer × checkpointing, every micro-batch) are priced in the
    order of the penalty the settings they share carry (:data:`GROUP`), and none once a plan that fits pays less than
    the next group (``bound``: such a penalty found before). Exact under both objectives: the best plan pays the least
    penalty of the plans that fit (:func:`order`); a group that pays more can hold neither the fastest plan nor one
    the 'memory' objective may take. Nothing fits: every group is priced, as in the full search (``closest``; else
    not the groups whose model states alone pass the usable memory, which cannot fit: whether anything fits is known
    without them, the bounded answer the no-fit suggestions need).

    Under the 'speed' objective a group at that penalty is skipped too when it carries more risky fallbacks than a
    plan that fits (``risky_bound`` from before): every candidate of a group pays at least the group's penalty and
    risky fallbacks, and at equal penalty it pays exactly those (a further fallback would add to the penalty), so
    :meth:`Candidate.key` ranks it after that plan whatever its speed."""
    speed = facts.workload.objective == Objective.SPEED
    groups = groups_in_order(layouts, allowed, pricing, speed)
    priced: list[tuple[int, list[Candidate]]] = []
    spared: set[tuple] = set()
    least = None if bound is None else (bound, risky_bound if speed and risky_bound is not None else _UNRANKED)
    deferred = []  # groups whose model states alone pass the usable memory: priced only if nothing fits
    usable = pricing.capacity_bytes * (1 - safety_margin(Device.CPU if facts.gpu is None else Device.CUDA))
    for penalty, rank, risky, layout, combo, micros, per_replica in groups:
        if least is not None and least < (penalty, risky):
            if least[0] < penalty:
                break
            continue
        group = layout.model_copy(update=dict(zip(CROSSED, combo)))
        if device_floor_bytes(facts.model, group, facts.hardware.nodes, pricing.cuda_context_bytes) > usable:
            deferred.append((rank, group, micros, per_replica))
            continue
        batch = _micro_batches(facts, group, micros, per_replica, pricing, spared)
        spared.update(_twin(c.plan) for c in batch if c.fits and not c.plan.activation_offloading)
        keys = [(c.penalty, c.risky if speed else _UNRANKED) for c in batch if c.fits]
        least = min(keys + ([least] if least is not None else []), default=None)
        priced.append((rank, batch))
    if least is None and closest:  # nothing fits: the full search's candidates, the smallest plan among them
        priced += [(rank, _micro_batches(facts, group, micros, per_replica, pricing, spared))
                   for rank, group, micros, per_replica in deferred]
    return [c for _, batch in sorted(priced, key=lambda p: p[0]) for c in batch]


def _heavy_candidates(facts: Facts, heavy: list[tuple[int, int, Plan, list[int], int]], out: list[Candidate],
                      allowed: dict[str, list[Any]], pricing: Pricing, bound: int | None) -> list[Candidate]:
    """``out`` (the light layouts' candidates) and the heavy layouts' (``(penalty, order, layout, micro-batches,
    per-replica batch)``), cheapest first while they could still win (:func:`_candidates`)."""
    speed = facts.workload.objective == Objective.SPEED
    spared = {_twin(c.plan) for c in out if c.fits}
    least = min([c.penalty for c in out if c.fits] + ([bound] if bound is not None else []), default=None)
    for penalty, _, plan, micros, per_replica in sorted(heavy, key=lambda h: h[:2]):
        if speed and least is not None and least < penalty:
            break
        priced = _layout_candidates(facts, plan, allowed, micros, per_replica, pricing, spared)
        spared.update(_twin(c.plan) for c in priced if c.fits and not c.plan.activation_offloading)
        least = min([c.penalty for c in priced if c.fits] + ([least] if least is not None else []), default=None)
        out += priced
    return out


def _layout_candidates(facts: Facts, layout: Plan, allowed: dict[str, list[Any]], micros: list[int],
                       per_replica: int, pricing: Pricing, spared: set[tuple] = frozenset()) -> list[Candidate]:
    """Every candidate of one layout: its groups (:data:`CROSSED`: tf32 x optimizer x checkpointing) x micro-batch."""
    out = []
    for combo in product(*(allowed[s] for s in CROSSED)):
        out += _micro_batches(facts, layout.model_copy(update=dict(zip(CROSSED, combo))),
                              micros, per_replica, pricing, spared)
    return out


def search(facts: Facts, best_only: bool = False, runs_on: Consumer | None = None,
           weighed: list[Effect] | None = None, closest: bool = True) -> PlanningResult:
    """Evaluate every allowed candidate and pick the best that fits (``best`` is None if none fits).

    ``best_only``: the same ``best`` for a fraction of the work (what a caller that reads nothing else wants: the
    best plan of another stack value, method or GPU); ``candidates`` then holds only those priced on the way
    (:func:`_best_candidates`), all of them when nothing fits.

    Tensor and pipeline parallel plans are evaluated only when they could win: under the 'speed'
    objective, when no plan without them fits at a lower fallback penalty than theirs (the rules make
    model parallelism a fallback: Narayanan et al. 2021, takeaways 1-2).

    ``runs_on``: only plans that consumer runs as priced (:func:`capability_forbids`): capability as a constraint.
    ``closest`` False (with ``best_only``): when nothing fits, the candidates need not hold the smallest plan (what
    asks only whether anything fits: the no-fit suggestions), which spares pricing the plans that cannot fit.

    Under ``--method auto`` a full fine-tuning plan that needs a quality-risk fallback is weighed against the best
    adapter plan (:func:`advisor.engine.method_policy.weigh_method`). ``weighed``: a recommendation's
    :attr:`PlanningResult.weighed`, for the searches that explain it (another stack value, say): they keep its
    choice of adapters instead of weighing again (one search, not two).
    """
    if weighed and facts.workload.method is None:
        result = _search(facts, best_only, runs_on, list(weighed), closest)
        result.weighed = list(weighed)
        return result
    result = _search(facts, best_only, runs_on, [], closest)
    return weigh_method(result, lambda extra: _search(facts, best_only, runs_on, extra, closest))


def _search(facts: Facts, best_only: bool, runs_on: Consumer | None, extra: list[Effect],
            closest: bool = True) -> PlanningResult:
    """:func:`search` without the method's weighing, with ``extra`` effects before the rules' own."""
    effects = [*extra, *propose_effects(facts)]
    domain = domains(facts)
    if runs_on is not None:
        effects += capability_forbids(runs_on, domain)
    allowed = allowed_values(domain, effects)
    log = LayoutLog()
    if nothing_fits(facts):  # the CUDA context alone passes the usable memory: pricing every plan would show it
        return PlanningResult(facts=facts, best=None, candidates=[], domains=domain, effects=effects,
                              check_effects=[], layouts=log)
    candidates = _candidates(facts, allowed, effects, model_parallel=False, log=log, best_only=best_only,
                             closest=closest)
    fitting = order([c for c in candidates if c.fits], facts.workload.objective)
    mp_penalty = min((e.penalty for e in effects if e.kind == "fallback" and e.setting in SPLIT), default=0)
    mp_possible = any(len(allowed[s]) > 1 for s in SPLIT)
    if mp_possible and (facts.workload.objective == Objective.MEMORY or not fitting or fitting[0].penalty >= mp_penalty):
        candidates += _candidates(facts, allowed, effects, model_parallel=True,
                                  bound=fitting[0].penalty if fitting else None, log=log, best_only=best_only,
                                  risky_bound=fitting[0].risky if fitting else None, closest=closest)
        fitting = order([c for c in candidates if c.fits], facts.workload.objective)
    best = fitting[0] if fitting else None
    checks = check_effects(facts, best.plan) if best else []
    return PlanningResult(facts=facts, best=best, candidates=candidates, domains=domain, effects=effects,
                          check_effects=checks, layouts=log)
