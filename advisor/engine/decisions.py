"""What a recommendation says about each setting: the value, its rules and sources, and the values that lost
(the models of the JSON contract), and the stack settings' explanations with figures: what a package that is not
installed where the plan trains would bring (:class:`PackageGain`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from advisor.engine.candidates import Candidate, evaluate
from advisor.engine.planner import PlanningResult, refusal, search
from advisor.core.kernels import INSTALL, STACK_PACKAGES
from advisor.core.units import GIB
from rules import REGISTRY, Plan


class SourceRef(BaseModel):
    """A cited document."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    title: str
    """document title and section"""
    url: str
    """public URL of the document"""


class AlternativeValue(BaseModel):
    """A value a setting could have taken, and why it lost."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    value: Any
    """the value the setting could have taken"""
    reason: str
    """why it lost, with the rule id where a rule decided"""


class SettingDecision(BaseModel):
    """One recommended setting and why."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    value: Any
    """the recommended value"""
    rule_ids: list[str] = Field(description="rules that decided it or removed alternatives")
    rationale: str
    """why, in one line"""
    sources: list[SourceRef]
    """the documents behind the rules"""
    alternatives: list[AlternativeValue] = Field(default_factory=list)
    """every other value of the setting and why it lost"""


class PackageGain(BaseModel):
    """A stack value the plan could not use only because its package is not installed where it trains (a soft
    forbid of ``rules/stack.py``), and the best plan the value would bring: what ``pip install`` buys."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    setting: str
    """the stack setting (attention, loss_kernel)"""
    value: Any
    """the value the package allows"""
    package: str
    """the package's distribution name (what pip installs)"""
    install: str
    """how to install it"""
    plan: Plan
    """the best plan with the value"""
    device_bytes: int
    """that plan's device memory per GPU, bytes"""
    tokens_per_s: float
    """that plan's estimated tokens per second, all devices"""
    speedup: float
    """its tokens/s over the chosen plan's (above 1: faster)"""


class Warning(BaseModel):
    """Something the user should know, from a rule."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    rule_id: str
    """the rule that warns"""
    message: str
    """what to know or do"""


def _fmt(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _sources(rule_ids: list[str]) -> list[SourceRef]:
    seen: dict[str, SourceRef] = {}
    for rid in rule_ids:
        for s in REGISTRY[rid].sources:
            title = f"{s.title}, {s.section}" if s.section else s.title
            seen.setdefault(s.url, SourceRef(title=title, url=s.url))
    return list(seen.values())


def _stack_alternative(
    setting: str, value: Any, result: PlanningResult, best: Candidate
) -> tuple[str, PackageGain | None]:
    """Why a stack value was not taken, with what it would change: for a better value the rules held back (not
    installed, not asked for) the best plan with it (of the chosen plan's tensor / pipeline / context split: a search
    of every split is the costliest part of an explanation on many GPUs); for another, the chosen plan priced with it
    (memory per device and tokens/s); no figures when no rule lets it run here. The second item: what installing the
    value's package would bring, when a missing package is all that held a faster plan back (None otherwise)."""
    facts = result.facts
    forbids = [e for e in result.effects if e.kind == "forbid" and e.setting == setting and e.matches(value)]
    hard = [e for e in forbids if e.hard]
    if hard:
        return f"{hard[0].reason} [{hard[0].rule_id}]", None
    domain = result.domains[setting]
    figures, gain = None, None
    if forbids and domain.index(value) < domain.index(getattr(best.plan, setting)):
        p = best.plan  # like with like: the chosen plan's tensor / pipeline / context split
        other = search(
            facts.model_copy(update={"workload": facts.workload.model_copy(update={setting: value})}),
            best_only=True,
            weighed=result.weighed,
            split=(p.tensor_parallel, p.pipeline_parallel, p.context_parallel),
        )
        if other.best is not None:
            figures = f"{_change(other.best, best)}, best plan {other.best.plan.describe()}"
            gain = _gain(setting, value, forbids, other.best, best)
    else:
        plan = best.plan.model_copy(update={setting: value})
        refused = refusal(facts, plan)
        if refused is not None and not forbids:
            return f"{refused.reason} [{refused.rule_id}]", None
        if refused is None:
            figures = _change(evaluate(facts, plan, result.effects), best)
    if not forbids:
        return f"with it: {figures}", None
    return f"{forbids[0].reason}" + (f"; with it: {figures}" if figures else "") + f" [{forbids[0].rule_id}]", gain


#: The least speed-up a package must bring to be named as a gain (what :func:`_change` calls faster rather than as
#: fast).
GAIN_THRESHOLD = 1.005


def _gain(setting: str, value: Any, forbids: list, alt: Candidate, best: Candidate) -> PackageGain | None:
    """What installing the package of a soft forbid brings: None when another rule also holds the value back (only
    the package should), or when the best plan with it is not faster."""
    packages = {e.package for e in forbids}
    speedup = alt.speed.tokens_per_s / best.speed.tokens_per_s
    if len(packages) != 1 or None in packages or speedup < GAIN_THRESHOLD:
        return None
    package = packages.pop()
    return PackageGain(
        setting=setting,
        value=value,
        package=STACK_PACKAGES[package],
        install=INSTALL.get(package, f"pip install {STACK_PACKAGES[package]}"),
        plan=alt.plan,
        device_bytes=alt.memory.device_bytes,
        tokens_per_s=alt.speed.tokens_per_s,
        speedup=speedup,
    )


def _change(alt: Candidate, best: Candidate) -> str:
    """What another plan changes against the chosen one: memory per device and tokens/s, in words."""
    gib = (alt.memory.device_bytes - best.memory.device_bytes) / GIB
    pace = alt.speed.tokens_per_s / best.speed.tokens_per_s - 1
    words = f"{abs(gib):.1f} GiB {'more' if gib > 0 else 'less'}" if abs(gib) >= 0.05 else "the same memory"
    words += f", {abs(pace) * 100:.0f} % {'faster' if pace > 0 else 'slower'}" if abs(pace) >= 0.005 else ", as fast"
    return words + ("" if alt.fits else " (does not fit)")


def decide_stack(setting: str, result: PlanningResult, best: Candidate) -> tuple[SettingDecision, list[PackageGain]]:
    """A stack setting of the chosen plan (:func:`advisor.engine.planner.with_stack`): why this value, and what each
    other value would change; and what the values held back only by a missing package would bring."""
    value = getattr(best.plan, setting)
    touching = [e for e in result.effects + result.check_effects if e.setting == setting]
    reasons = [e.reason for e in touching if e.kind == "set" and e.matches(value)]
    if not reasons:
        reasons = ["the best value the rules allow for this plan"]
    rule_ids = list(dict.fromkeys(e.rule_id for e in touching))
    alternatives, gains = [], []
    for v in result.domains[setting]:
        if v != value:
            reason, gain = _stack_alternative(setting, v, result, best)
            alternatives.append(AlternativeValue(value=v, reason=reason))
            gains += [gain] if gain is not None else []
    return SettingDecision(
        value=value,
        rule_ids=rule_ids,
        rationale="; ".join(dict.fromkeys(reasons)),
        sources=_sources(rule_ids),
        alternatives=alternatives,
    ), gains
