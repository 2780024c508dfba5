"""The groups of candidates a best-only search prices: each legal layout crossed with the crossed settings' values
(:data:`advisor.core.dimensions.CROSSED`), in the order of the fallback penalty they share, made as they are read."""

from __future__ import annotations

import heapq
from itertools import product
from typing import Any, Callable, Iterator

from advisor.core.dimensions import CROSSED, LAYOUT, SPLIT
from advisor.core.vocabulary import Penalty
from advisor.engine.candidates import Pricing
from rules import Effect, Plan

#: A layout's own settings: the table's layout rows and the tensor / pipeline / context split it was made for.
SHAPE = (*LAYOUT, *SPLIT)
GROUP = (*SHAPE, *CROSSED)  #: the settings a group of candidates shares (a layout's, and the crossed rows)


def within(effect: Effect, settings: tuple[str, ...]) -> bool:
    """Whether a fallback reads only ``settings`` (its own and its ``when``'s)."""
    return effect.setting in settings and all(k in settings for k in effect.when or {})


#: The charges worked out by :func:`paid`, by the fallbacks' settings, values, conditions and penalties.
_PAID: dict[tuple, dict[tuple, tuple[int, int]]] = {}
_PAID_ENTRIES = 64


def paid(effects: list[Effect]) -> Callable[[dict[str, Any]], tuple[int, int]]:
    """``paid(values)``: the (penalty, risky count) the fallbacks ``effects`` charge a plan with these field values,
    worked out once per values of the settings they read (thousands of layouts share a few), and shared by the
    searches that charge the same fallbacks (those that explain a recommendation: :data:`_PAID`)."""
    reads = sorted({s for e in effects for s in (e.setting, *(e.when or {}))})
    signature = tuple((e.setting, repr(e.value), repr(e.when), int(e.penalty)) for e in effects)
    if len(_PAID) >= _PAID_ENTRIES and signature not in _PAID:
        _PAID.clear()
    known = _PAID.setdefault(signature, {})

    def charge(values: dict[str, Any]) -> tuple[int, int]:
        key = tuple(values.get(s) for s in reads)
        found = known.get(key)
        if found is None:
            applied = [e for e in effects if e.applies(values)]
            found = known[key] = (sum(e.penalty for e in applied), sum(e.penalty == Penalty.RISKY for e in applied))
        return found

    return charge


def groups_in_order(
    layouts: list[tuple[Plan, list[int], int]], allowed: dict[str, list[Any]], pricing: Pricing, speed: bool
) -> Iterator[tuple]:
    """Each layout's groups (:data:`CROSSED` combinations) as ``(penalty, rank, risky fallbacks, layout, combination,
    micro-batches, per-replica batch)``, in the order of (penalty, rank) (``rank``: the group's place in layout x
    combination order), made as they are read: a search that stops at a penalty never makes the costlier ones.

    The fallbacks that read a crossed setting (``own``) add the same penalty to every layout whose settings they read
    alike, so each combination's share is worked out once per such layout values."""
    own = [e for e in pricing.fallbacks if within(e, GROUP) and not within(e, SHAPE)]  # they read a crossed setting
    layout_own = paid([e for e in pricing.fallbacks if within(e, SHAPE)])
    reads = sorted({s for e in own for s in (e.setting, *(e.when or {})) if s not in CROSSED})
    combos = list(product(*(allowed[s] for s in CROSSED)))
    shares: dict[tuple, list[tuple[int, int, int, tuple]]] = {}

    def share(values: dict[str, Any]) -> list[tuple[int, int, int, tuple]]:
        key = tuple(values[s] for s in reads)
        found = shares.get(key)
        if found is None:
            found = []
            for i, combo in enumerate(combos):
                paid = [e for e in own if e.applies({**values, **dict(zip(CROSSED, combo))})]
                found.append((sum(e.penalty for e in paid), i, sum(e.penalty == Penalty.RISKY for e in paid), combo))
            found = shares[key] = sorted(found, key=lambda f: f[:2])
        return found

    def of(index: int, layout: Plan, micros: list[int], per_replica: int) -> Iterator[tuple]:
        penalty, risky = layout_own(layout.__dict__)
        for add, i, add_risky, combo in share(layout.__dict__):
            yield (
                penalty + add,
                index * len(combos) + i,
                (risky + add_risky) if speed else 0,
                layout,
                combo,
                micros,
                per_replica,
            )

    return heapq.merge(*(of(i, *entry) for i, entry in enumerate(layouts)), key=lambda g: g[:2])
