"""What a rule is, what it can say, and the registry that holds every rule once.

A rule is a small class with plain metadata attributes (``id``, ``title``, ``sources``,
``rationale``) and up to two methods:

- ``propose(facts)`` before the search: forbid, prefer or mark as fallback the values of a
  searched setting, set a setting that is not searched, or warn;
- ``check(facts, plan)`` after the planner picked a plan: set plan-dependent settings, warn;
- ``refuse(facts, plan)``: a combination of settings that cannot run (e.g. offload without sharding),
  as one hard ``forbid`` effect, or None.

A ``forbid`` is *hard* when the value cannot run on these facts at all (fp16 on the CPU, ZeRO on one
GPU), not merely inadvisable (plain SGD, DataParallel): the planner never searches either, and
:func:`advisor.engine.planner.check_plan` refuses a given plan (``estimate``, ``validate``, ``emit``,
the wizard) only for hard ones.

Rules hold no search logic and no I/O. A malformed rule (no source URL, duplicate id, …) raises
:class:`RuleDefinitionError` when its module is imported.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field

from advisor.core.vocabulary import Penalty
from advisor.core.dimensions import Setting
from rules.facts import Facts, Plan

EffectKind = Literal["forbid", "prefer", "fallback", "set", "warn"]

#: How rules that speak of the same setting combine, strongest first (what :func:`advisor.engine.legality.allowed_values`
#: and the ranking apply; docs/ARCHITECTURE.md, "Rule precedence"):
#:
#: 1. a hard ``forbid``: the value cannot run here; nothing brings it back;
#: 2. the user's pin (a ``forbid`` with ``pin``: every value but the one asked for); a pin a hard forbid rules out
#:    leaves no plan (the API says why in one line), never another value;
#: 3. a soft ``forbid``: the value is inadvisable; soft forbids never empty a setting: when they would forbid every
#:    value the hard forbids and pins leave, they are lifted for that setting and the order below decides;
#: 4. a ``fallback``: used only when no plan without it fits (the least total penalty wins, then the fewest risky
#:    fallbacks), then the fastest plan (tokens/s) among those;
#: 5. a ``prefer``: among plans equally fast, the one with the most preferences; and for a stack setting, which the
#:    planner settles per layout (the first value that runs), the order in which values are tried: preferred first;
#: 6. the default order: the vocabulary's search order (:data:`advisor.core.vocabulary.SEARCH_ORDER`, a stack
#:    setting's values best first).
PRECEDENCE = ("hard forbid", "pin", "soft forbid", "fallback", "speed", "prefer", "default order")


class Source(BaseModel):
    """A public document a rule comes from."""

    title: str
    url: str
    section: str | None = None


class Effect(BaseModel):
    """What a rule says about one setting.

    - ``forbid``: the value is not a candidate (``reason`` explains the alternative's loss);
    - ``prefer``: among equally fast plans, take this value;
    - ``fallback``: use the value only when no plan without it fits; plans pay ``penalty``
      (the planner minimises total penalty first, then maximises throughput);
    - ``set``: the setting takes ``value`` (settings the planner does not search);
    - ``warn``: a message for the user (``setting`` optional).
    """

    kind: EffectKind
    setting: Setting | None = None
    value: Any = None
    reason: str
    penalty: Penalty = Penalty.NONE
    rule_id: str = ""
    hard: bool = False
    """a ``forbid`` of a value that cannot run here (not merely inadvisable): given plans are refused too"""
    pin: bool = False
    """a ``forbid`` that says the user asked for another value (``--method lora``, ``--attention sdpa``): it outranks
    every soft forbid (:data:`PRECEDENCE`)"""
    when: dict[Setting, Any] | None = None
    """a ``fallback`` or ``prefer`` that holds only in plans with these other settings (e.g. bf16 weights cost
    precision only when every weight trains: ``{method: full}``); a value may be a list: any of"""
    quality_risk: bool = False
    """a ``fallback`` that may cost the trained model's quality, not only time (bf16 weights without fp32 masters,
    Adafactor, fp16 on a bf16-pretrained model, the optimizer step in backward without clipping): under ``--method
    auto`` a full fine-tuning plan that needs one is weighed against the fastest adapter plan (rule
    ``method.full-unless-quality-risk``)"""
    package: str | None = None
    """a soft ``forbid`` that installing this package lifts (its import name, a key of
    :data:`advisor.core.kernels.STACK_PACKAGES`): the value would run where the plan trains once it is installed"""

    def matches(self, value: Any) -> bool:
        """Whether a setting value is the one this effect names (``value`` may be a list: any of)."""
        if isinstance(self.value, list):
            return value in self.value
        return value == self.value

    def applies(self, values: dict[str, Any]) -> bool:
        """Whether a plan (its field values) names this effect's value and meets its ``when`` condition."""
        if self.setting not in values or not self.matches(values[self.setting]):
            return False
        if not self.when:
            return True
        return all(values.get(k) in v if isinstance(v, list) else values.get(k) == v for k, v in self.when.items())


class RuleDefinitionError(Exception):
    """A rule declared without id, title, a source URL or rationale, or with a duplicate id."""


class Rule:
    """Base class: subclass, fill the metadata, override ``propose`` and/or ``check``."""

    id: ClassVar[str]
    title: ClassVar[str]
    topic: ClassVar[str]
    sources: ClassVar[list[Source]]
    rationale: ClassVar[str]

    def propose(self, facts: Facts) -> list[Effect]:
        """Effects before the search (see :class:`Effect`)."""
        return []

    def check(self, facts: Facts, plan: Plan) -> list[Effect]:
        """Effects once a plan is chosen: plan-dependent ``set`` and ``warn`` only."""
        return []

    def refuse(self, facts: Facts, plan: Plan) -> Effect | None:
        """A hard ``forbid`` of a combination of settings the plan cannot run with, or None.

        Decide on the plan's layout alone (parallelism, offload, tensor / pipeline parallel, GPUs and
        processes): the planner asks once per layout, not once per candidate."""
        return None

    # helpers: rules build effects with these, so every effect carries the rule id
    def forbid(
        self,
        setting: Setting,
        value: Any,
        reason: str,
        *,
        hard: bool = False,
        package: str | None = None,
        pin: bool = False,
    ) -> Effect:
        return Effect(
            kind="forbid",
            setting=setting,
            value=value,
            reason=reason,
            rule_id=self.id,
            hard=hard,
            package=package,
            pin=pin,
        )

    def prefer(self, setting: Setting, value: Any, reason: str, *, when: dict[Setting, Any] | None = None) -> Effect:
        return Effect(kind="prefer", setting=setting, value=value, reason=reason, rule_id=self.id, when=when)

    def fallback(
        self,
        setting: Setting,
        value: Any,
        reason: str,
        penalty: Penalty,
        *,
        when: dict[Setting, Any] | None = None,
        quality_risk: bool = False,
    ) -> Effect:
        return Effect(
            kind="fallback",
            setting=setting,
            value=value,
            reason=reason,
            penalty=penalty,
            rule_id=self.id,
            when=when,
            quality_risk=quality_risk,
        )

    def set(self, setting: Setting, value: Any, reason: str) -> Effect:
        return Effect(kind="set", setting=setting, value=value, reason=reason, rule_id=self.id)

    def warn(self, reason: str, setting: Setting | None = None) -> Effect:
        return Effect(kind="warn", setting=setting, reason=reason, rule_id=self.id)


class RuleInfo(BaseModel):
    """A rule's metadata, as ``advisor rules --json`` prints it."""

    id: str
    title: str
    topic: str
    rationale: str
    sources: list[Source] = Field(min_length=1)


REGISTRY: dict[str, Rule] = {}


def register(cls: type[Rule]) -> type[Rule]:
    """Class decorator: validate a rule's metadata and add one instance to the registry.

    Raises:
        RuleDefinitionError: missing metadata, a source without an http(s) URL, or a duplicate id.
    """
    for attr in ("id", "title", "topic", "sources", "rationale"):
        if not getattr(cls, attr, None):
            raise RuleDefinitionError(f"rule {cls.__name__} has no {attr}")
    if cls.id in REGISTRY:
        raise RuleDefinitionError(f"duplicate rule id '{cls.id}'")
    for source in cls.sources:
        if not source.url.startswith(("https://", "http://")):
            raise RuleDefinitionError(f"rule {cls.id}: source '{source.title}' has no public URL")
    if not cls.id.startswith(f"{cls.topic}."):
        raise RuleDefinitionError(f"rule id '{cls.id}' must start with its topic '{cls.topic}.'")
    REGISTRY[cls.id] = cls()
    return cls


def info(rule: Rule) -> RuleInfo:
    """The metadata of a registered rule."""
    return RuleInfo(
        id=rule.id, title=rule.title, topic=rule.topic, rationale=rule.rationale, sources=list(rule.sources)
    )
