"""Why each other fine-tuning method lost, in figures: the best plan of each method (its own search), what it needs
without offload, and the fallbacks it pays beyond the chosen plan's (the ``method`` setting's alternatives in
:mod:`advisor.engine.recommendation`)."""

from __future__ import annotations

from advisor.core.units import GIB
from advisor.core.vocabulary import Offload
from advisor.core.dimensions import Setting
from advisor.engine.candidates import Candidate
from advisor.engine.decisions import AlternativeValue, _fmt
from advisor.engine.legality import no_layout_error
from advisor.engine.planner import PlanningResult, search


def _pinned_search(result: PlanningResult, method: str | None, best_only: bool = False) -> PlanningResult:
    """The planner's search with the method fixed (what the best plan of another method would be); None: the
    planner's own choice of method. ``best_only``: :func:`advisor.engine.planner.search`'s."""
    workload = result.facts.workload.model_copy(update={"method": method})
    return search(result.facts.model_copy(update={"workload": workload}), best_only=best_only)


def method_alternatives(result: PlanningResult, best: Candidate) -> list[AlternativeValue]:
    """Every other fine-tuning method and why it lost (:func:`_method_alternative`); when the user chose the method,
    the forbid that says so and, for comparison, what the other method would do (from one unpinned search)."""
    value = best.plan.method
    if result.facts.workload.method is None:
        return [
            AlternativeValue(value=m, reason=_method_alternative(m, result, best))
            for m in result.domains[Setting.METHOD]
            if m != value
        ]
    unpinned = _pinned_search(result, None, best_only=True)  # its facts and effects only
    out = []
    for m in result.domains[Setting.METHOD]:
        if m == value:
            continue
        forbids = [e for e in result.effects if e.kind == "forbid" and e.setting == Setting.METHOD and e.matches(m)]
        figures = _method_alternative(m, unpinned, best)
        reason = f"{forbids[0].reason} [{forbids[0].rule_id}]; for comparison: {figures}" if forbids else figures
        out.append(AlternativeValue(value=m, reason=reason))
    return out


def _method_alternative(method: str, result: PlanningResult, best: Candidate) -> str:
    """Why another fine-tuning method lost, with figures: its best plan's speed and memory (offload included),
    or what it would need; and, when its best plan offloads, what it needs without offloading."""
    forbids = [e for e in result.effects if e.kind == "forbid" and e.setting == Setting.METHOD and e.matches(method)]
    if forbids:
        return f"{forbids[0].reason} [{forbids[0].rule_id}]"
    other = _pinned_search(result, method, best_only=True)
    if other.best is not None and other.best.plan.offload != Offload.NONE:
        other = _pinned_search(result, method)  # every plan without offload, for the smallest of them
    if not other.candidates:  # the other settings asked for rule this method out (fp8 over a 4-bit base, say)
        return str(no_layout_error(other.facts, other.effects))
    if other.best is None:
        closest = min(other.candidates, key=lambda c: c.memory.device_bytes)
        return (
            f"does not fit: its smallest plan needs {closest.memory.device_bytes / GIB:.1f} GiB of "
            f"{closest.memory.usable_bytes / GIB:.1f} GiB usable"
        )
    alt = other.best
    ratio = alt.speed.tokens_per_s / best.speed.tokens_per_s
    pace = f"{ratio:.2f}x the tokens/s" if ratio < 0.995 or ratio > 1.005 else "as fast"
    parts = [
        f"best plan {alt.plan.describe()}: {alt.memory.device_bytes / GIB:.1f} GiB per GPU, est. "
        f"{alt.speed.tokens_per_s:,.0f} tokens/s ({pace})"
    ]
    if alt.plan.offload != Offload.NONE:
        on_gpu = [c for c in other.candidates if c.plan.offload == Offload.NONE]
        if on_gpu:
            smallest = min(on_gpu, key=lambda c: c.memory.device_bytes)
            parts.append(
                f"without offload it needs {smallest.memory.device_bytes / GIB:.1f} GiB of "
                f"{smallest.memory.usable_bytes / GIB:.1f} GiB usable"
            )
    own = [e for e in alt.fallbacks if e.setting == Setting.METHOD]
    if own:
        parts.append(f"{own[0].reason} [{own[0].rule_id}]")
    others = [name for e, name in zip(alt.fallbacks, _fallback_names(alt)) if e.setting != Setting.METHOD]
    if alt.penalty > best.penalty and others:
        parts.append("it needs " + ", ".join(others))
    return "; ".join(parts)


def _fallback_names(candidate: Candidate) -> list[str]:
    return [f"{e.setting}={_fmt(getattr(candidate.plan, e.setting))}" for e in candidate.fallbacks]
