"""The recommendation: the chosen plan, every setting with its rules, sources and losing
alternatives, the memory breakdown, the speed, and the warnings (the JSON contract of DESIGN.md)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from advisor.engine.memory import MemoryEstimate
from advisor.engine.decisions import (AlternativeValue, PackageGain, SettingDecision, SourceRef,  # noqa: F401
                                      Warning, _fmt, _sources, decide_stack)
from advisor.engine.legality import check_plan
from advisor.engine.candidates import MEMORY_SPEED_TOLERANCE, Candidate, evaluate, order, unpriced, with_bands
from advisor.core.dimensions import (TRL_TARGET, Consumer, MULTI_GPU, SEARCHED, SPLIT, Setting, refusal, runs_only_in,
                                     swapped)
from advisor.engine.planner import PlanningResult
from advisor.engine.method_alternatives import method_alternatives
from advisor.engine.schema import SCHEMA_VERSION
from advisor.engine.communication import all_to_all_seconds
from advisor.engine.speed import SpeedEstimate
from probes.hardware import HardwareProfile
from probes.model import ModelProfile
from advisor.core.units import GIB
from advisor.core.vocabulary import Objective, Penalty
from rules import Effect, Plan, Workload
from advisor.core.plan import STACK_SETTINGS


class PlanSummary(BaseModel):
    """A runner-up plan with its estimates."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    plan: Plan
    """the runner-up plan"""
    device_bytes: int
    """its estimated device memory per GPU, bytes"""
    fits: bool
    """it fits the memory"""
    tokens_per_s: float
    """its estimated tokens per second, all devices"""
    step_time_s: float
    """its estimated seconds per optimizer step"""
    fallback_penalty: int
    """sum of its fallback penalties (0: no fallback needed)"""


class Recommendation(BaseModel):
    """What ``advisor recommend --json`` prints."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    schema_version: str = SCHEMA_VERSION
    """MAJOR.MINOR of this JSON's schema"""
    hardware: HardwareProfile
    """the hardware planned for"""
    model: ModelProfile
    """the model's profile"""
    workload: Workload
    """sequence length and global batch size"""
    plan: Plan = Field(description="the chosen plan, all searched settings in one place")
    settings: dict[str, SettingDecision]
    """every setting with its value, rules, sources and losing alternatives"""
    memory: MemoryEstimate
    """the chosen plan's memory estimate per device"""
    speed: SpeedEstimate
    """the chosen plan's speed estimate"""
    warnings: list[Warning]
    """what the rules want the user to know"""
    suggestions: list[str] = Field(default_factory=list, description="slow, consider: faster catalog hardware when "
                                   "the plan offloads or needs risky fallbacks")
    gains: list[PackageGain] = Field(default_factory=list, description="what installing a package the plan could not "
                                     "assume where it trains would bring: the stack values held back only by it, "
                                     "each with the best plan it allows, fastest first")
    alternative_plans: list[PlanSummary] = Field(default_factory=list, description="the next best plans that fit")
    estimate_only: str | None = Field(None, description="why no file --emit writes runs this plan as it was priced "
                                      "(the hand-off's refusal, advisor.core.dimensions): the plan is an estimate "
                                      "only; None: the emitted files run it")
    hand_off: str | None = Field(None, description="the --emit target whose files alone run some settings as "
                                 "priced, and those settings ('--emit trl runs activation_offloading as priced; ...': "
                                 "TRL's SFTConfig); None: every target runs what it writes")

    def value(self, setting: Setting) -> Any:
        """The recommended value of a setting.

        Raises:
            KeyError: the recommendation has no such setting (a rule that should set it did not run).
        """
        decision = self.settings.get(setting)
        if decision is None:
            raise KeyError(f"the recommendation has no setting '{setting}'")
        return decision.value


def _settings_phrase(candidate: Candidate, effects: list[Effect]) -> str:
    """``setting=value`` of the candidate's plan for each setting the fallbacks name, once each (a rule may charge
    one value twice: activation offloading pays a rung more without checkpointing)."""
    settings = dict.fromkeys(e.setting for e in effects)
    return ", ".join(f"{s}={_fmt(getattr(candidate.plan, s))}" for s in settings)


def _what_else(candidate: Candidate, best: Candidate) -> str:
    """The fallbacks a candidate needs beyond the best plan's, as a phrase."""
    return _settings_phrase(candidate, [e for e in candidate.fallbacks if e not in best.fallbacks]) or \
        "a costlier fallback"


def _riskier(alt: Candidate, best: Candidate) -> str:
    """Why a plan that pays the same fallback penalty as the best one lost: it takes a risky fallback more
    (:attr:`Candidate.risky`), whatever its speed."""
    risky = [e for e in alt.fallbacks if e.penalty == Penalty.RISKY and e not in best.fallbacks]
    what = "; ".join(f"{e.setting}={_fmt(getattr(alt.plan, e.setting))}: {e.reason} [{e.rule_id}]" for e in risky)
    change = alt.speed.tokens_per_s / best.speed.tokens_per_s - 1
    pace = f"{change:+.0%}" if abs(change) >= 0.005 else "as fast"
    return (f"est. {alt.speed.tokens_per_s:,.0f} tokens/s ({pace}), but only with a risky fallback, {what}; at the "
            "same fallback cost the plan without it is taken")


def _unpriced_reason(setting: str, value: Any, result: PlanningResult) -> str:
    """Why the search priced no plan with ``setting=value``: a rule refused every layout with it, a plan without
    its fallback fits, or (a micro-batch) a smaller one already did not fit with accumulation, which
    :func:`advisor.engine.priced_groups.micro_batches` stops at since memory grows with the micro-batch."""
    refused = result.layouts.refusal_of(setting, value)
    if refused is not None:  # no layout the search tried could take it
        return f"{refused.reason} [{refused.rule_id}]"
    fallbacks = [e for e in result.effects if e.kind == "fallback" and e.setting == setting and e.matches(value)]
    if fallbacks:
        return f"not needed: a plan without it fits; {fallbacks[0].reason} [{fallbacks[0].rule_id}]"
    if setting == Setting.MICRO_BATCH_SIZE:
        smaller = [c for c in result.candidates if c.plan.micro_batch_size < value]
        below = max((c.plan.micro_batch_size for c in smaller), default=None)
        at_below = [c for c in smaller if c.plan.micro_batch_size == below]
        if at_below and not any(c.fits for c in at_below):
            closest = min(at_below, key=lambda c: c.memory.device_bytes)
            return (f"does not fit: micro-batch {below} already needs {closest.memory.device_bytes / GIB:.1f} GiB of "
                    f"{closest.memory.usable_bytes / GIB:.1f} GiB usable, and memory grows with the micro-batch")
    return "not applicable to this hardware"


def _twin(setting: str, value: Any, result: PlanningResult, best: Candidate) -> list[Candidate]:
    """The chosen plan with ``setting=value``, priced, when its price does not read the setting (TF32 under 16-bit
    precision: :func:`advisor.engine.candidates.unpriced`), which the search does not price
    (:func:`advisor.engine.priced_groups.dominated`), and it may run; else []."""
    if setting not in unpriced(best.plan):
        return []
    plan = best.plan.model_copy(update={setting: value})
    if check_plan(result.facts, plan, result.effects) is not None:
        return []
    return [evaluate(result.facts, plan, result.effects)]


def _alternative_reason(setting: str, value: Any, result: PlanningResult, best: Candidate) -> str:
    forbids = [e for e in result.effects if e.kind == "forbid" and e.setting == setting and e.matches(value)]
    if forbids:
        return f"{forbids[0].reason} [{forbids[0].rule_id}]"
    with_value = [c for c in result.candidates if getattr(c.plan, setting) == value] + _twin(setting, value, result,
                                                                                              best)
    if not with_value:
        return _unpriced_reason(setting, value, result)
    fitting = sorted((c for c in with_value if c.fits), key=Candidate.key)
    if not fitting:
        closest = min(with_value, key=lambda c: c.memory.device_bytes)
        # the search prices model-parallel layouts only while they could win: unpriced, they are not ruled out
        split = (any(c.plan.model_parallel_size > 1 for c in with_value) or setting in SPLIT
                 or all(v == 1 for s in SPLIT for v in result.domains[s]))
        return (f"does not fit{'' if split else ' without tensor / pipeline / context parallel'}: the smallest plan "
                f"with it needs {closest.memory.device_bytes / GIB:.1f} GiB of "
                f"{closest.memory.usable_bytes / GIB:.1f} GiB usable")
    alt = fitting[0]
    if result.facts.workload.objective == Objective.MEMORY:
        alt = min(fitting, key=Candidate.memory_key)
        more = alt.memory.device_bytes - best.memory.device_bytes
        if more > 0:
            return (f"needs {more / GIB:.2f} GiB more ({alt.memory.device_bytes / GIB:.2f} vs "
                    f"{best.memory.device_bytes / GIB:.2f} GiB): the objective is the least memory within "
                    f"{MEMORY_SPEED_TOLERANCE * 100:.0f} % of the fastest plan")
        fastest = min(result.fitting, key=Candidate.key)
        if alt.penalty <= fastest.penalty and more < 0:
            return (f"saves {-more / GIB:.2f} GiB but runs at {alt.speed.tokens_per_s / fastest.speed.tokens_per_s:.0%}"
                    f" of the fastest plan's tokens/s: beyond the memory objective's {MEMORY_SPEED_TOLERANCE * 100:.0f} % "
                    "tolerance")
    own = [e for e in alt.fallbacks if e.setting == setting]
    if alt.penalty > best.penalty:
        others = [e for e in alt.fallbacks if e.setting != setting and e not in best.fallbacks]
        parts = [f"{own[0].reason} [{own[0].rule_id}]"] if own else []
        if others:
            parts.append("here it fits only with " + _settings_phrase(alt, others))
        figures = f" (fits: {alt.memory.device_bytes / GIB:.1f} GiB, est. {alt.speed.tokens_per_s:,.0f} tokens/s)"
        return ("; ".join(parts) or f"fits only with {_what_else(alt, best)}") + figures
    if alt.penalty == best.penalty and alt.risky > best.risky:
        return _riskier(alt, best)
    slower = 1 - alt.speed.tokens_per_s / best.speed.tokens_per_s
    prefs = [e for e in result.effects if e.kind == "prefer" and e.setting == setting
             and e.matches(getattr(best.plan, setting))]
    if slower >= 0.01 or not prefs:
        if slower > 0.0005:
            return (f"{slower * 100:.0f} % slower: est. {alt.speed.tokens_per_s:,.0f} vs "
                    f"{best.speed.tokens_per_s:,.0f} tokens/s")
        return "equally fast; the other value was ranked first"
    return f"about as fast ({slower * 100:.1f} % slower); {prefs[0].reason} [{prefs[0].rule_id}]"


def _communication(facts, best: Candidate) -> str:
    """Per-GPU memory and the step's communication over the links that carry it, in words."""
    hw = facts.hardware
    if hw.nodes > 1:
        net = hw.network_label if hw.interconnect else f"{hw.network_label} (assumed)"
        link = f"{net} at {hw.nics} × {hw.network_gbit_s:g} Gb/s per node between {hw.nodes} nodes"
    elif hw.nvlink_ring:
        link = "NVLink"
    else:
        link = "PCIe" if hw.gpu is None or hw.gpu.peer_to_peer else "PCIe through host memory (no peer-to-peer)"
    m, s = best.memory, best.speed
    return (f"per GPU {m.device_bytes / GIB:.1f} of {m.usable_bytes / GIB:.1f} GiB usable; est. communication "
            f"{s.communication_s:.2f} s of the {s.step_time_s:.2f} s step over {link}")


def _experts(result: PlanningResult, best: Candidate) -> str:
    """Expert parallelism against the chosen plan, in figures: the best plan that fits on each side, its memory,
    its communication (the all-to-all's share) and tokens/s."""
    facts = result.facts
    hw = facts.hardware
    other = [c for c in result.fitting if (c.plan.expert_parallel > 1) != (best.plan.expert_parallel > 1)]
    if not other:
        return "no plan with the other choice fits"
    runner = order(other, facts.workload.objective)[0]

    def words(c: Candidate) -> str:
        p = c.plan
        a2a = (p.gradient_accumulation_steps + p.pipeline_parallel - 1) * all_to_all_seconds(
            facts.model, p, facts.workload.seq_len, facts.gpu, hw.nvlink_ring, hw.nodes,
            hw.inter_node_bytes_per_s)
        share = f", all-to-all {a2a:.2f} s" if a2a else ""
        return (f"expert parallel {p.expert_parallel} with {p.parallelism}: {c.memory.device_bytes / GIB:.1f} GiB per "
                f"GPU, communication {c.speed.communication_s:.2f} s of the {c.speed.step_time_s:.2f} s step{share}, "
                f"est. {c.speed.tokens_per_s:,.0f} tokens/s")

    return f"chosen {words(best)}; best other: {words(runner)}"


def _chosen(result: PlanningResult, *, fits: bool = False) -> str:
    """What the objective picks, as a noun phrase (``fits``: say that the fastest plan is one that fits)."""
    if result.facts.workload.objective == Objective.MEMORY:
        return f"least-memory plan within {MEMORY_SPEED_TOLERANCE * 100:.0f} % of the fastest"
    return "fastest plan that fits" if fits else "fastest plan"


def _decide_searched(setting: str, result: PlanningResult, best: Candidate) -> SettingDecision:
    value = getattr(best.plan, setting)
    touching = [e for e in result.effects + result.check_effects if e.setting == setting]
    chosen = best.plan.__dict__
    reasons = [e.reason for e in touching if (e.kind == "set" and e.matches(value))
               or (e.kind in ("prefer", "fallback") and e.applies(chosen))]
    if not reasons:
        unused = [e for e in touching if e.kind == "fallback"  # those this plan could have paid (their ``when``)
                  and e.applies({**chosen, setting: e.value if not isinstance(e.value, list) else e.value[0]})]
        blocked = [result.layouts.refusal_of(setting, e.value) for e in unused if not isinstance(e.value, list)]
        if unused and len(blocked) == len(unused) and all(blocked):  # no layout could take any of them
            reasons = [f"the only value a layout can take: {blocked[0].reason}"]
        elif unused:
            values = ", ".join(dict.fromkeys(_fmt(e.value) for e in unused))
            reasons = [f"not needed: the {_chosen(result)} fits without {setting}={values}"]
        else:
            others = [e for e in touching if e.kind == "forbid" and not e.matches(value)]
            if others and all(any(e.matches(v) for e in others) for v in result.domains[setting] if v != value):
                reasons = [f"the only value the rules allow: {others[0].reason}"]
            else:
                reasons = [f"the value of the {_chosen(result, fits=True)}"]
    rule_ids = list(dict.fromkeys(e.rule_id for e in touching))
    alternatives = (method_alternatives(result, best) if setting == Setting.METHOD else
                    [AlternativeValue(value=v, reason=_alternative_reason(setting, v, result, best))
                     for v in result.domains[setting] if v != value])
    return SettingDecision(value=value, rule_ids=rule_ids, rationale="; ".join(dict.fromkeys(reasons)),
                           sources=_sources(rule_ids), alternatives=alternatives)


def _decide_set(setting: str, effects: list[Effect]) -> SettingDecision:
    chosen = effects[-1]
    rule_ids = list(dict.fromkeys(e.rule_id for e in effects))
    return SettingDecision(value=chosen.value, rule_ids=rule_ids, rationale=chosen.reason, sources=_sources(rule_ids))


def estimate_only(plan: Plan) -> str | None:
    """Why no file ``--emit`` writes runs ``plan`` as it was priced: the hand-off's refusal, or what even TRL's
    ``SFTConfig`` (``--emit trl``, which runs the most) swaps (the table of dimensions,
    :class:`advisor.core.dimensions.Consumer` EMIT); None: a target's files run it (:func:`hand_off` says which)."""
    refused = refusal(Consumer.EMIT, plan)
    if refused is not None:
        return refused
    return "; ".join(swapped(Consumer.EMIT, plan, TRL_TARGET)[1]) or None


def hand_off(plan: Plan) -> str | None:
    """Which ``--emit`` target's files alone run some of ``plan``'s settings as priced, and those settings (``--emit
    trl runs activation_offloading as priced; ...``); None: the Trainer's files run what any target runs."""
    only = runs_only_in(Consumer.EMIT, plan)
    return "; ".join(f"--emit {target} runs {', '.join(names)} as priced; the Trainer's files do not"
                     for target, names in only.items()) or None


def build(result: PlanningResult, top: int = 5, suggestions: list[str] | None = None) -> Recommendation:
    """Assemble the recommendation from a planning result whose ``best`` is not None."""
    best = result.best
    assert best is not None, "build() needs a plan that fits"
    facts = result.facts
    settings: dict[str, SettingDecision] = {}
    searched = [s for s in SEARCHED if not (s in MULTI_GPU and facts.hardware.num_gpus <= 1)
                and not (s == Setting.EXPERT_PARALLEL and not facts.model.num_experts)]
    if facts.gpu is None:
        searched = [s for s in searched if s != Setting.TF32]
    for setting in searched:
        settings[setting] = _decide_searched(setting, result, best)
    gains: list[PackageGain] = []
    for setting in STACK_SETTINGS:
        settings[setting], held_back = decide_stack(setting, result, best)
        gains += held_back
    accumulation = [e for e in result.check_effects
                    if e.kind == "set" and e.setting == Setting.GRADIENT_ACCUMULATION_STEPS]
    settings[Setting.GRADIENT_ACCUMULATION_STEPS] = _decide_set(Setting.GRADIENT_ACCUMULATION_STEPS, accumulation)
    gpus = facts.hardware.num_gpus
    if gpus > 1 and Setting.PARALLELISM in settings:
        settings[Setting.PARALLELISM].rationale += "; " + _communication(facts, best)
    if Setting.EXPERT_PARALLEL in settings:
        settings[Setting.EXPERT_PARALLEL].rationale += "; " + _experts(result, best)
    settings[Setting.NUM_GPUS] = SettingDecision(
        value=gpus, rule_ids=[], sources=[],
        rationale="training on the CPU: no GPU found" if gpus == 0 else f"all {gpus} GPU(s) of the hardware")
    set_effects: dict[str, list[Effect]] = {}
    for e in result.effects + result.check_effects:
        if e.kind == "set" and e.setting not in settings:
            set_effects.setdefault(e.setting, []).append(e)
    for setting, effects in set_effects.items():
        settings[setting] = _decide_set(setting, effects)
    warnings = [Warning(rule_id=e.rule_id, message=e.reason)
                for e in result.effects + result.check_effects if e.kind == "warn"]
    runners = [c for c in result.fitting if c is not best][:top]
    memory, speed = with_bands(best.memory, best.speed, best.plan, facts.gpu.cc[0] if facts.gpu else None)
    return Recommendation(
        hardware=facts.hardware, model=facts.model, workload=facts.workload, plan=best.plan, settings=settings,
        memory=memory, speed=speed, warnings=warnings, suggestions=suggestions or [],
        estimate_only=estimate_only(best.plan),
        hand_off=hand_off(best.plan),
        gains=sorted(gains, key=lambda g: -g.speedup),
        alternative_plans=[PlanSummary(plan=c.plan, device_bytes=c.memory.device_bytes, fits=c.fits,
                                       tokens_per_s=c.speed.tokens_per_s, step_time_s=c.speed.step_time_s,
                                       fallback_penalty=c.penalty) for c in runners])
