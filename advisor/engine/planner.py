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
from typing import Any, Iterator

from advisor.engine.candidates import Candidate, Pricing, nothing_fits, order
from advisor.engine.priced_groups import best_candidates, heavy_candidates, layout_candidates
from advisor.engine.groups import SHAPE, paid, within
from advisor.core.plan import STACK_SETTINGS
from advisor.engine.method_policy import weigh_method
from probes.checkpoint import planned_double_quant
from advisor.core.errors import UsageError
from advisor.core.kernels import Attention, LossKernel
from advisor.core.limits import divisors
from advisor.core.vocabulary import (Device, Method, Objective, Offload, Optimizer, Parallelism, Penalty, Precision,
                                   WeightsDtype, searched, values)
from advisor.core.dimensions import Consumer, LAYOUT, SPLIT, Setting
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


#: Each layout plan's refusal (:func:`_settle`), by model, hardware and every setting of the plan: the searches that
#: weigh the method or explain a stack value settle other sets of values, most of them settled before. Entries keep
#: their model and hardware alive, as in :data:`_LAYOUTS`.
_REFUSED: dict[tuple, tuple] = {}
_REFUSED_ENTRIES = 65536


def _settle(facts: Facts, plan: Plan, choices: list[list[Any]], refusing: list[Rule]
            ) -> tuple[list[tuple[Any, ...]], set[tuple[str, Any]], list[tuple[tuple[str, Any], Effect]]]:
    """(the legal layout tuples, the (setting, value) pairs they hold with the tensor / pipeline split, each refused
    (setting, value) with the refusal, in order) of :func:`_layouts`."""
    split = ((Setting.TENSOR_PARALLEL, plan.tensor_parallel), (Setting.PIPELINE_PARALLEL, plan.pipeline_parallel),
             (Setting.CONTEXT_PARALLEL, plan.context_parallel))
    legal, pairs, refused = [], set(split), []
    # the plan's other settings and the layout's values name the plan: LAYOUT's fields of ``plan`` are overwritten
    base = (id(facts.model), id(facts.hardware), *map(id, refusing),
            tuple(v for k, v in plan.__dict__.items() if k not in LAYOUT))
    for combo in product(*choices):
        values = dict(zip(LAYOUT, combo))
        key = (*base, combo)
        hit = _REFUSED.get(key)
        if hit is None or hit[0] is not facts.model or hit[1] is not facts.hardware:
            if len(_REFUSED) >= _REFUSED_ENTRIES:
                _REFUSED.clear()
            hit = _REFUSED[key] = (facts.model, facts.hardware,
                                   refusal(facts, plan.model_copy(update=values), refusing, layout_only=True))
        effect = hit[2]
        if effect is None:
            legal.append(combo)
            pairs.update(values.items())
        else:
            refused.append(((effect.setting, values.get(effect.setting, dict(split).get(effect.setting))), effect))
    return legal, (pairs if legal else set()), refused


def _shape_fallbacks(pricing: Pricing) -> list[Effect]:
    """The fallbacks that read a layout's own settings alone (:data:`advisor.engine.groups.SHAPE`): what every
    candidate of the layout pays at least (a fallback whose ``when`` reads a setting outside the layout, such as
    checkpointing, may not apply to all of them)."""
    return [e for e in pricing.fallbacks if within(e, SHAPE)]


def _reads_stack(pricing: Pricing) -> bool:
    """Whether a fallback reads a stack setting: a layout's groups are then ordered by its settled stack."""
    return any(s in STACK_SETTINGS for e in pricing.fallbacks for s in (e.setting, *(e.when or {})))


def _splits(facts: Facts, allowed: dict[str, list[Any]], effects: list[Effect], model_parallel: bool,
            only: tuple[int, int, int] | None = None) -> Iterator[tuple[Plan, list[str], list[int], int]]:
    """Each tensor / pipeline / context split of the GPUs (``model_parallel``: those with t·p·c > 1, else none) as
    ``(layout plan, data-parallel strategies, micro-batches, per-replica batch)``: with model parallelism the
    data-parallel size is GPUs / (t·p·c), its micro-batches divide the larger per-replica batch, and a single replica
    runs without a data-parallel wrapper. ``only``: that (t, p, c) split alone."""
    device = Device.CPU if facts.gpu is None else Device.CUDA
    gpus, w = facts.hardware.num_gpus, facts.workload
    gbs = w.global_batch_size
    for tp, pp, cp in product(*(allowed[s] for s in SPLIT)):
        if (tp * pp * cp > 1) != model_parallel or (gpus and gpus % (tp * pp * cp)) or only not in (None, (tp, pp, cp)):
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
        layout = Plan(device=device, precision=allowed[Setting.PRECISION][0], tf32=False,
                      optimizer=allowed[Setting.OPTIMIZER][0], gradient_checkpointing=False, micro_batch_size=micros[0],
                      gradient_accumulation_steps=gbs // (micros[0] * dp), num_gpus=gpus, tensor_parallel=tp,
                      pipeline_parallel=pp, context_parallel=cp, parallelism=strategies[0], lora_rank=w.lora_rank,
                      lora_targets=w.lora_targets, legacy_bitsandbytes=installed_legacy_bitsandbytes(facts),
                      double_quant=planned_double_quant(facts.model.quantization))
        yield layout, strategies, micros, gbs // dp


def _candidates(facts: Facts, allowed: dict[str, list[Any]], effects: list[Effect], model_parallel: bool,
                bound: int | None = None, log: LayoutLog | None = None, best_only: bool = False,
                risky_bound: int | None = None, closest: bool = True, only: tuple[int, int, int] | None = None
                ) -> list[Candidate]:
    """Every allowed plan that could win, with (``model_parallel``) or without tensor / pipeline / context
    parallelism (:func:`_splits`).

    Layouts whose own penalty reaches :attr:`Penalty.ADAPTERS` (adapters, offload), and those that offload
    activations (a fallback whatever its rung, and the costliest layouts to price), are priced last, cheapest
    first, and under the 'speed' objective only while they could still win: not once a plan that fits pays less
    than they do (``bound``: the least penalty of a fitting plan found before this call; ``risky_bound``: the fewest
    risky fallbacks of a fitting plan at that penalty). Model-parallel layouts after a data-parallel plan that fits
    (``bound`` given) are all priced that way: a fallback themselves, they are what costs most to price on many GPUs,
    and a costlier one is explained by its fallback without figures. ``best_only``: only the candidates that could
    be the best plan (:func:`advisor.engine.priced_groups.best_candidates`; ``closest``: its groups that cannot fit
    too), each layout's stack settled (:func:`with_stack`) only when one of its groups is priced. ``only``: the
    (t, p, c) split alone (:func:`_splits`).
    """
    refusing = _refusing_rules()
    pricing = Pricing.of(facts, effects)
    shape = paid(_shape_fallbacks(pricing))
    # the penalty above which no layout is priced: what best_candidates and heavy_candidates would not price
    pruned = bound if best_only or (model_parallel and facts.workload.objective == Objective.SPEED) else None
    lazy = best_only and not _reads_stack(pricing)

    def stack(plan: Plan) -> Plan | None:
        return with_stack(facts, plan, allowed, refusing)

    light: list[tuple[Plan, list[int], int]] = []
    heavy: list[tuple[int, int, Plan, list[int], int]] = []
    for layout, strategies, micros, per_replica in _splits(facts, allowed, effects, model_parallel, only):
        for combo in _layouts(facts, layout, allowed, strategies, refusing, log):
            update = dict(zip(LAYOUT, combo))
            penalty = shape({**layout.__dict__, **update})[0]  # the layout's alone
            if pruned is not None and penalty > pruned:  # pays more than a plan that fits: cannot win
                continue
            plan = layout.model_copy(update=update)
            if not lazy and (plan := stack(plan)) is None:
                continue
            bounded = model_parallel and bound is not None  # priced only while it could win, as the heavy ones
            if penalty < Penalty.ADAPTERS and not plan.activation_offloading and not bounded:
                light.append((plan, micros, per_replica))
            else:
                heavy.append((penalty, len(heavy), plan, micros, per_replica))
    if best_only:
        ranked = light + [h[2:] for h in sorted(heavy, key=lambda h: h[:2])]
        return best_candidates(facts, ranked, allowed, pricing, bound, risky_bound, closest, stack if lazy else None)
    out = [c for plan, micros, per_replica in light for c in layout_candidates(facts, plan, allowed, micros,
                                                                                per_replica, pricing)]
    return heavy_candidates(facts, heavy, out, allowed, pricing, bound)


def search(facts: Facts, best_only: bool = False, runs_on: Consumer | None = None,
           weighed: list[Effect] | None = None, closest: bool = True,
           split: tuple[int, int, int] | None = None) -> PlanningResult:
    """Evaluate every allowed candidate and pick the best that fits (``best`` is None if none fits).

    ``best_only``: the same ``best`` for a fraction of the work (what a caller that reads nothing else wants: the
    best plan of another stack value, method or GPU); ``candidates`` then holds only those priced on the way
    (:func:`advisor.engine.priced_groups.best_candidates`), all of them when nothing fits.

    Tensor and pipeline parallel plans are evaluated only when they could win: under the 'speed'
    objective, when no plan without them fits at a lower fallback penalty than theirs (the rules make
    model parallelism a fallback: Narayanan et al. 2021, takeaways 1-2).

    ``runs_on``: only plans that consumer runs as priced (:func:`capability_forbids`): capability as a constraint.
    ``closest`` False (with ``best_only``): when nothing fits, the candidates need not hold the smallest plan (what
    asks only whether anything fits: the no-fit suggestions), which spares pricing the plans that cannot fit.
    ``split``: plans of that (tensor, pipeline, context) parallel split alone (what explains a plan's stack values
    compares it with: like with like, and a search of one split on many GPUs, not of every split).

    Under ``--method auto`` a full fine-tuning plan that needs a quality-risk fallback is weighed against the best
    adapter plan (:func:`advisor.engine.method_policy.weigh_method`). ``weighed``: a recommendation's
    :attr:`PlanningResult.weighed`, for the searches that explain it (another stack value, say): they keep its
    choice of adapters instead of weighing again (one search, not two). A search of every candidate weighs the method
    on best-only searches first (the same best plans, :func:`best_candidates`), then prices every candidate of the
    chosen side once, instead of every candidate of both.
    """
    if weighed and facts.workload.method is None:
        result = _search(facts, best_only, runs_on, list(weighed), closest, split)
        result.weighed = list(weighed)
        return result
    if not best_only and facts.workload.method is None:  # the method first, from the best plans alone (cheap)
        probe = search(facts, best_only=True, runs_on=runs_on, closest=closest, split=split)
        if probe.best is None:  # nothing fits: what is read of it is its smallest plan, which the probe holds
            return probe
        if probe.weighed:
            return search(facts, runs_on=runs_on, weighed=probe.weighed, closest=closest, split=split)
        return _search(facts, best_only, runs_on, [], closest, split)
    result = _search(facts, best_only, runs_on, [], closest, split)
    return weigh_method(result, lambda extra: _search(facts, best_only, runs_on, extra, closest, split))


def _search(facts: Facts, best_only: bool, runs_on: Consumer | None, extra: list[Effect],
            closest: bool = True, split: tuple[int, int, int] | None = None) -> PlanningResult:
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
    model_parallel = split is not None and split != (1, 1, 1)
    candidates = [] if model_parallel else _candidates(facts, allowed, effects, model_parallel=False, log=log,
                                                       best_only=best_only, closest=closest)
    fitting = order([c for c in candidates if c.fits], facts.workload.objective)
    mp_penalty = min((e.penalty for e in effects if e.kind == "fallback" and e.setting in SPLIT), default=0)
    mp_possible = split != (1, 1, 1) and any(len(allowed[s]) > 1 for s in SPLIT)
    if mp_possible and (facts.workload.objective == Objective.MEMORY or not fitting
                        or fitting[0].penalty >= mp_penalty):
        candidates += _candidates(facts, allowed, effects, model_parallel=True,
                                  bound=fitting[0].penalty if fitting else None, log=log, best_only=best_only,
                                  risky_bound=fitting[0].risky if fitting else None, closest=closest, only=split)
        fitting = order([c for c in candidates if c.fits], facts.workload.objective)
    best = fitting[0] if fitting else None
    checks = check_effects(facts, best.plan) if best else []
    return PlanningResult(facts=facts, best=best, candidates=candidates, domains=domain, effects=effects,
                          check_effects=checks, layouts=log)
