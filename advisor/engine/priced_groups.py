"""How a search prices the groups of candidates it keeps (:mod:`advisor.engine.planner` makes the layouts): each
layout's groups (:data:`advisor.core.dimensions.CROSSED` combinations) at each micro-batch, bounded.

The bounds, each exact (the same best plan as pricing everything, ties included):
- by fallback penalty: a group that pays more than a plan that fits cannot win (:func:`best_candidates`,
  :func:`heavy_candidates`);
- by memory: a group whose model states alone pass the usable memory (its floor,
  :func:`advisor.engine.allocator.device_floor_bytes`) cannot fit, and when nothing fits the smallest plan is
  searched in the order of the floors (:func:`_smallest`);
- by the micro-batch: memory grows with it while gradients accumulate (:func:`micro_batches`).
"""

from __future__ import annotations

from itertools import product
from typing import Any, Callable

from advisor.core.dimensions import CROSSED, NOT_STATES, Setting
from advisor.core.vocabulary import Device, Objective
from advisor.engine.allocator import device_floor_bytes
from advisor.engine.candidates import Candidate, Pricing, evaluate, safety_margin, unpriced
from advisor.engine.groups import groups_in_order
from rules import Facts, Plan


def _twin(plan: Plan) -> tuple:
    """A plan's settings with activation offloading off: the key of the plan it would spare (:func:`micro_batches`)."""
    return tuple({**plan.__dict__, Setting.ACTIVATION_OFFLOADING.value: False}.values())


def micro_batches(facts: Facts, plan: Plan, micros: list[int], per_replica: int, pricing: Pricing,
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


#: A fitting plan's risky count where it does not rank (the 'memory' objective, or no count known): above any
#: group's, so only the penalty prunes.
_UNRANKED = float("inf")


def best_candidates(facts: Facts, layouts: list[tuple[Plan, list[int], int]], allowed: dict[str, list[Any]],
                     pricing: Pricing, bound: int | None, risky_bound: int | None = None,
                     closest: bool = True, stack: Callable[[Plan], Plan | None] | None = None) -> list[Candidate]:
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
    :meth:`Candidate.key` ranks it after that plan whatever its speed.

    ``stack``: the layouts come without their stack, which this settles (once per layout) when one of its groups is
    reached (a layout without one that runs has no candidate): most layouts of a bounded search are never reached."""
    speed = facts.workload.objective == Objective.SPEED
    groups = groups_in_order(layouts, allowed, pricing, speed)
    priced: list[tuple[int, list[Candidate]]] = []
    spared: set[tuple] = set()
    least = None if bound is None else (bound, risky_bound if speed and risky_bound is not None else _UNRANKED)
    deferred = []  # groups whose model states alone pass the usable memory: priced only if nothing fits
    usable = pricing.capacity_bytes * (1 - safety_margin(Device.CPU if facts.gpu is None else Device.CUDA))
    floor_of = _floors(facts, pricing)
    stacked: dict[int, Plan | None] = {}
    skip = dominated(allowed, pricing)
    for penalty, rank, risky, layout, combo, micros, per_replica in groups:
        if least is not None and least < (penalty, risky):
            if least[0] < penalty:
                break
            continue
        if skip(layout, combo) or stacked.get(id(layout), layout) is None:  # a twin, or its stack cannot run
            continue
        floor = floor_of(layout, combo)  # the model states read no stack setting (NOT_STATES): before stacking
        if floor > usable and not closest:  # cannot fit, and not asked for the smallest plan
            continue
        if stack is not None:
            if id(layout) not in stacked:
                stacked[id(layout)] = stack(layout)
            layout = stacked[id(layout)]
            if layout is None:
                continue
        if floor > usable:
            deferred.append((floor, rank, layout, combo, micros, per_replica))
            continue
        group = layout.model_copy(update=dict(zip(CROSSED, combo)))
        batch = micro_batches(facts, group, micros, per_replica, pricing, spared)
        spared.update(_twin(c.plan) for c in batch if c.fits and not c.plan.activation_offloading)
        keys = [(c.penalty, c.risky if speed else _UNRANKED) for c in batch if c.fits]
        least = min(keys + ([least] if least is not None else []), default=None)
        priced.append((rank, batch))
    if least is None and closest:  # nothing fits: the smallest plan, from the groups that could hold it
        priced += _smallest(facts, priced, deferred, pricing)
    return [c for _, batch in sorted(priced, key=lambda p: p[0]) for c in batch]


#: The crossed settings the model states read (:data:`NOT_STATES` are the others): a group's memory floor reads these.
_STATE_CROSSED = tuple(i for i, s in enumerate(CROSSED) if s not in NOT_STATES)


def _floors(facts: Facts, pricing: Pricing) -> Callable[[Plan, tuple], int]:
    """``floor(layout, combination)``: :func:`advisor.engine.allocator.device_floor_bytes` of the layout's group
    with those crossed values, worked out once per layout and the crossed values the model states read (most
    groups share one: TF32 and checkpointing do not change them)."""
    floors: dict[tuple, int] = {}

    def floor(layout: Plan, combo: tuple) -> int:
        key = (id(layout), *(combo[i] for i in _STATE_CROSSED))
        found = floors.get(key)
        if found is None:
            update = {CROSSED[i]: combo[i] for i in _STATE_CROSSED}
            found = floors[key] = device_floor_bytes(facts.model, layout.model_copy(update=update),
                                                     facts.hardware.nodes, pricing.cuda_context_bytes)
        return found

    return floor


def _smallest(facts: Facts, priced: list[tuple[int, list[Candidate]]], deferred: list[tuple], pricing: Pricing
              ) -> list[tuple[int, list[Candidate]]]:
    """The deferred groups (``(floor bytes, rank, group, micro-batches, per-replica batch)``) that could hold the
    smallest plan when nothing fits (what the no-fit answer names), priced in the order of their floor
    (:func:`advisor.engine.allocator.device_floor_bytes`, a lower bound of every candidate's device memory) until
    the next floor passes the smallest plan priced so far (``priced``'s included): branch and bound on memory, the
    same smallest plan as pricing them all, ties to the earlier rank included."""
    least = min((c.memory.device_bytes for _, batch in priced for c in batch), default=None)
    out = []
    for floor, rank, layout, combo, micros, per_replica in sorted(deferred, key=lambda d: d[:2]):
        if least is not None and floor > least:
            break
        batch = micro_batches(facts, layout.model_copy(update=dict(zip(CROSSED, combo))), micros, per_replica, pricing)
        least = min([c.memory.device_bytes for c in batch] + ([least] if least is not None else []), default=None)
        out.append((rank, batch))
    return out


def heavy_candidates(facts: Facts, heavy: list[tuple[int, int, Plan, list[int], int]], out: list[Candidate],
                      allowed: dict[str, list[Any]], pricing: Pricing, bound: int | None) -> list[Candidate]:
    """``out`` (the light layouts' candidates) and the heavy layouts' (``(penalty, order, layout, micro-batches,
    per-replica batch)``), cheapest first while they could still win (:func:`_candidates`)."""
    speed = facts.workload.objective == Objective.SPEED
    spared = {_twin(c.plan) for c in out if c.fits}
    least = min([c.penalty for c in out if c.fits] + ([bound] if bound is not None else []), default=None)
    for penalty, _, plan, micros, per_replica in sorted(heavy, key=lambda h: h[:2]):
        if speed and least is not None and least < penalty:
            break
        priced = layout_candidates(facts, plan, allowed, micros, per_replica, pricing, spared)
        spared.update(_twin(c.plan) for c in priced if c.fits and not c.plan.activation_offloading)
        least = min([c.penalty for c in priced if c.fits] + ([least] if least is not None else []), default=None)
        out += priced
    return out


def dominated(allowed: dict[str, list[Any]], pricing: Pricing) -> Callable[[Plan, tuple], bool]:
    """``dominated(layout, combination)``: whether a group is a priced twin that cannot win. A crossed setting the
    layout's price does not read (:func:`advisor.engine.candidates.unpriced`: TF32 under 16-bit precision) and no
    fallback reads gives the same memory and speed at every value; the value that meets the most preferences
    (the first of them on a tie) ranks first under both objectives (:meth:`Candidate.key`), so the groups at its
    other values are not priced (an explanation of such a value prices the chosen plan with it)."""
    read = {s for e in pricing.fallbacks for s in (e.setting, *(e.when or {}))}
    read |= {e.setting for e in pricing.preferences if e.when}  # a preference that holds in some plans only

    def kept(setting: str) -> Any:
        return max(allowed[setting], key=lambda v: sum(e.matches(v) for e in pricing.preferences
                                                        if e.setting == setting))

    keep = {i: kept(s) for i, s in enumerate(CROSSED) if s not in read and len(allowed[s]) > 1}

    def is_dominated(layout: Plan, combo: tuple) -> bool:
        blind = unpriced(layout)
        return any(CROSSED[i] in blind and combo[i] != value for i, value in keep.items())

    return is_dominated


def layout_candidates(facts: Facts, layout: Plan, allowed: dict[str, list[Any]], micros: list[int],
                       per_replica: int, pricing: Pricing, spared: set[tuple] = frozenset()) -> list[Candidate]:
    """Every candidate of one layout that could rank: its groups (:data:`CROSSED`: tf32 x optimizer x checkpointing,
    less the :func:`dominated` ones) x micro-batch."""
    out = []
    skip = dominated(allowed, pricing)
    for combo in product(*(allowed[s] for s in CROSSED)):
        if skip(layout, combo):
            continue
        out += micro_batches(facts, layout.model_copy(update=dict(zip(CROSSED, combo))),
                              micros, per_replica, pricing, spared)
    return out

