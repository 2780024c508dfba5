"""``--method auto`` weighs full fine-tuning against adapters by the figures (rule
``method.full-unless-quality-risk``): the fallback ladder alone would keep a full fine-tune that needs bf16 weights
and Adafactor although a LoRA plan trains faster with neither."""

from __future__ import annotations

from typing import Any, Callable

from advisor.core.dimensions import Setting
from advisor.core.vocabulary import Method, Objective
from advisor.engine.legality import allowed_values
from rules import Effect
from rules.base import REGISTRY
from rules.method import FullUnlessQualityRisk

#: What the adapters-only search forbids full fine-tuning with, until the figures say why (then replaced).
_WEIGHING = "adapters weighed against full fine-tuning (method.full-unless-quality-risk)"


def quality_risks(fallbacks: list[Effect], plan_values: dict) -> list[str]:
    """The fallbacks of a plan that may cost the trained model's quality (:attr:`rules.base.Effect.quality_risk`),
    as ``setting=value``, in the order the plan pays them."""
    return [f"{e.setting}={plan_values[e.setting]}" for e in fallbacks if e.quality_risk]


def weigh_method(result: Any, research: Callable[[list[Effect]], Any]) -> Any:
    """``result`` (the search's :class:`advisor.engine.planner.PlanningResult`, which imports this module), or the
    adapters-only search's result when the rule prefers its plan.

    Only under ``--method auto`` (no pin), when the best plan is full fine-tuning and adapters are allowed here.
    ``research(extra)``: the same search with ``extra`` effects first. The adapters-only result carries the rule's
    effects: a soft forbid of full fine-tuning whose reason gives what it would need and its speed, and a prefer of
    the adapter methods that says the trade-off on the card.
    """
    facts, best = result.facts, result.best
    if facts.workload.method is not None or best is None or best.plan.method != Method.FULL:
        return result
    memory = facts.workload.objective == Objective.MEMORY
    risks = quality_risks(best.fallbacks, best.plan.__dict__)
    if not (risks or memory):
        return result
    methods = allowed_values({Setting.METHOD: result.domains[Setting.METHOD]}, result.effects)[Setting.METHOD]
    if not any(Method.of(m).spec.adapters for m in methods):
        return result
    rule = REGISTRY[FullUnlessQualityRisk.id]
    weighing = rule.forbid(Setting.METHOD, Method.FULL, _WEIGHING)
    other = research([weighing])
    alt = other.best
    if alt is None or alt.plan.method == Method.FULL:
        return result
    chosen = rule.weigh(
        risks,
        (best.speed.tokens_per_s, best.memory.device_bytes),
        (alt.speed.tokens_per_s, alt.memory.device_bytes),
        alt.plan.method,
        memory,
    )
    if not chosen:
        return result
    other.effects = chosen + [e for e in other.effects if e is not weighing]
    other.weighed = chosen
    return other
