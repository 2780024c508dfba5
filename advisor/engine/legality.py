"""What may run: the rules' effects on the facts, the one legality check of a given plan, and the stack a layout
runs with. The planner (:mod:`advisor.engine.planner`) searches within it; ``estimate``, ``validate``, ``emit`` and
the wizard check a given plan with :func:`check_plan`."""

from __future__ import annotations

from typing import Any

from advisor.core.errors import UsageError
from advisor.core.vocabulary import Device, Method, Optimizer, Parallelism, Precision
from advisor.core.dimensions import Consumer, Setting, refused_values
from rules import REGISTRY, Effect, Facts, Plan
from rules.base import Rule
from advisor.core.plan import STACK_SETTINGS


def propose_effects(facts: Facts) -> list[Effect]:
    """Run every rule's ``propose`` on the facts."""
    effects: list[Effect] = []
    for rule in REGISTRY.values():
        effects.extend(rule.propose(facts))
    return effects


def check_effects(facts: Facts, plan: Plan) -> list[Effect]:
    """Run every rule's ``check`` on the chosen plan."""
    effects: list[Effect] = []
    for rule in REGISTRY.values():
        effects.extend(rule.check(facts, plan))
    return effects


def advice(facts: Facts, plan: Plan) -> list[Effect]:
    """What the rules say of a given plan (``estimate``), as warnings: their warnings on the facts and on the plan,
    and each soft ``forbid`` the plan goes against, a value the planner would not choose here (bf16 on a T4,
    nn.DataParallel, SGD, eager attention), with the rule's reason. As in the planner's search, a layout with one
    model replica (tensor / pipeline parallel over every GPU) has no data-parallel strategy to weigh."""
    found = []
    one_replica = plan.data_parallel_size == 1
    for e in propose_effects(facts):
        if e.setting == Setting.PARALLELISM and one_replica:
            continue
        if e.kind == "forbid" and not e.hard and e.applies(plan.__dict__):
            value = getattr(plan, e.setting)
            found.append(e.model_copy(update={"kind": "warn", "reason": f"{_shown(e.setting, value)}: {e.reason}"}))
        elif e.kind == "warn":
            found.append(e)
    return found + [e for e in check_effects(facts, plan) if e.kind == "warn"]


def _refusing_rules() -> list[Rule]:
    """The rules that refuse combinations of settings (those overriding ``Rule.refuse``)."""
    return [rule for rule in REGISTRY.values() if type(rule).refuse is not Rule.refuse]


def refusal(facts: Facts, plan: Plan, rules: list[Rule] | None = None, *, layout_only: bool = False) -> Effect | None:
    """The first rule's hard ``forbid`` of a combination of the plan's settings, or None (``layout_only``: not a
    refusal of a stack setting's value, which :func:`with_stack` settles for each layout after it)."""
    for rule in rules if rules is not None else _refusing_rules():
        effect = rule.refuse(facts, plan)
        if effect is not None and not (layout_only and effect.setting in STACK_SETTINGS):
            return effect
    return None


def check_plan(facts: Facts, plan: Plan, effects: list[Effect] | None = None) -> Effect | None:
    """Whether ``plan`` can run on the facts: the rule effect that refuses it, or None.

    The one legality check of a given plan (``estimate``, ``validate``, ``emit``, the wizard): a hard
    ``forbid`` of one of its values (fp16 on the CPU, ZeRO on one GPU, TF32 before Ampere), else a rule's
    refusal of a combination (offload without sharding, tensor parallel beyond a node). Inadvisable
    values (SGD, DataParallel) are the planner's business, not refused here.
    """
    effects = effects if effects is not None else propose_effects(facts)
    values_ = plan.model_dump()
    for e in effects:
        if e.kind == "forbid" and e.hard and e.setting in values_ and e.matches(values_[e.setting]):
            return e
    return refusal(facts, plan)


def require_legal(facts: Facts, plan: Plan) -> None:
    """Raise when :func:`check_plan` refuses ``plan``.

    Raises:
        UsageError: one line naming the flag and value, the reason and the rule id.
    """
    effect = check_plan(facts, plan)
    if effect is None:
        return
    raise UsageError(f"{_shown(effect.setting, effect.value)}: {effect.reason} [{effect.rule_id}]")


def with_stack(
    facts: Facts, plan: Plan, allowed: dict[str, list[Any]], refusing: list[Rule] | None = None
) -> Plan | None:
    """``plan`` with each stack setting (:data:`advisor.core.plan.STACK_SETTINGS`, in that order) at the first value the
    rules allow that no rule refuses for its layout, or None when a setting has none.

    The values are declared best first and a better kernel never costs memory or speed (FlashAttention before SDPA,
    Liger before the standard loss, compile on, packing where samples are shorter), so one stack per layout stands
    for every other: the recommendation prices the values not taken (:mod:`advisor.engine.decisions`).
    """
    rules = refusing if refusing is not None else _refusing_rules()
    values, chosen = dict(plan.__dict__), {}
    for setting in STACK_SETTINGS:
        key = (
            id(facts.model),
            id(facts.hardware),
            tuple(values.values()),
            setting,
            tuple(allowed[setting]),
            tuple(map(id, rules)),
        )
        hit = _STACK.get(key)
        if hit is None or hit[0] is not facts.model or hit[1] is not facts.hardware:
            if len(_STACK) >= _STACK_ENTRIES:
                _STACK.clear()
            here = plan.model_copy(update=chosen) if chosen else plan
            hit = _STACK[key] = (facts.model, facts.hardware, _first_runnable(facts, here, setting, allowed, rules))
        if hit[2] is None:
            return None
        chosen[setting] = values[setting] = hit[2][0]
    return plan.model_copy(update=chosen)


#: The stack values settled before (:func:`_first_runnable`), by model, hardware, plan, setting and the values tried:
#: a rule's ``refuse`` reads only the plan, the model and the hardware (as for the planner's layouts), so the searches
#: that explain a recommendation (the same layouts, one stack setting pinned) reuse the settled values of the others.
#: Each entry keeps its model and hardware alive, so their ``id`` in the key cannot be reused by another object.
_STACK: dict[tuple, tuple] = {}
_STACK_ENTRIES = 65536


def _first_runnable(
    facts: Facts, plan: Plan, setting: str, allowed: dict[str, list[Any]], rules: list[Rule]
) -> tuple[Any] | None:
    """``(value,)``: the first of ``allowed[setting]`` no rule refuses for ``plan`` with it, or None."""
    for value in allowed[setting]:
        candidate = plan.model_copy(update={setting: value})
        # only refusals of a stack value count here: the layout's own were settled before (its accumulation,
        # say, is the first micro-batch's, not the one a candidate will run with)
        if not any((e := rule.refuse(facts, candidate)) is not None and e.setting in STACK_SETTINGS for rule in rules):
            return (value,)
    return None


def require_runnable_pins(facts: Facts) -> None:
    """Refuse a stack value the user asked for that cannot run here at all (a rule's hard forbid).

    Raises:
        UsageError: one line naming the flag, the reason and the rule id.
    """
    pins = facts.workload.pinned()
    if not pins:
        return
    for e in propose_effects(facts):
        if e.kind == "forbid" and e.hard and e.setting in pins and e.matches(pins[e.setting]):
            raise UsageError(f"{_shown(e.setting, pins[e.setting])}: {e.reason} [{e.rule_id}]")


def _shown(setting: str, value: Any) -> str:
    """A setting's value as the flag that asks for it: ``--torch-compile``, ``--no-fp8``, ``--attention eager``."""
    flag = "--" + str(setting).replace("_", "-")
    return flag if value is True else f"--no-{flag[2:]}" if value is False else f"{flag} {value}"


def no_layout_error(facts: Facts, effects: list[Effect]) -> UsageError:
    """The error when no layout can run at all with what the user asked for (a search with no candidate, e.g.
    ``--packing`` where no attention kernel attends within packed samples): one line naming the settings asked
    for and the first rule that refuses them on the plainest plan of this hardware, or that refuses its method (a
    pre-quantized checkpoint full fine-tuning cannot load)."""
    pins = facts.workload.pinned()
    method = {"method": facts.workload.method} if facts.workload.method else {}
    if method and Method.of(facts.workload.method).spec.adapters:  # the adapters asked for, which a rule may refuse
        method.update(lora_rank=facts.workload.lora_rank, lora_targets=facts.workload.lora_targets)
    asked = ", ".join(_shown(k, v) for k, v in {**method, **pins}.items() if k != "lora_rank") or "these settings"
    gpu = facts.gpu
    precision = (
        Precision.BF16
        if gpu is not None and gpu.bf16
        else Precision.FP16
        if gpu is not None and gpu.tensor_cores
        else Precision.FP32
    )
    plan = Plan(
        device=Device.CPU if gpu is None else Device.CUDA,
        precision=precision,
        tf32=False,
        optimizer=Optimizer.ADAMW,
        gradient_checkpointing=False,
        micro_batch_size=1,
        gradient_accumulation_steps=1,
        parallelism=Parallelism.NONE,
        num_gpus=facts.hardware.num_gpus,
        **method,
        **pins,
    )
    asked_values = {**pins, "method": plan.method}  # the method asked for, else the plainest plan's (full)
    refused = refusal(facts, plan) or next(
        (
            e
            for e in effects
            if e.kind == "forbid" and e.hard and e.setting in asked_values and e.matches(asked_values[e.setting])
        ),
        None,
    )
    why = f": {refused.reason} [{refused.rule_id}]" if refused is not None else ""
    return UsageError(f"no plan can run with {asked} here{why}")


def allowed_values(domain: dict[str, list[Any]], effects: list[Effect]) -> dict[str, list[Any]]:
    """Each setting's values the rules leave, in the order they are tried (:data:`rules.base.PRECEDENCE`): hard
    forbids and the user's pins remove values (an empty setting: no plan, and the API says why), then soft forbids,
    but never the last values the first two leave; a stack setting's preferred values come first."""
    allowed = {}
    for setting, choices in domain.items():
        forbids = [e for e in effects if e.kind == "forbid" and e.setting == setting]
        left = [v for v in choices if not any((e.hard or e.pin) and e.matches(v) for e in forbids)]
        softly = [v for v in left if not any(e.matches(v) for e in forbids)]
        left = softly or left  # soft forbids never empty a setting the hard forbids and pins leave values
        if setting in STACK_SETTINGS:
            prefers = [e for e in effects if e.kind == "prefer" and e.setting == setting and not e.when]
            left.sort(key=lambda v: -sum(e.matches(v) for e in prefers))
        allowed[setting] = left
    return allowed


def capability_forbids(consumer: Consumer, domain: dict[str, list[Any]]) -> list[Effect]:
    """Hard forbids of the searched values ``consumer`` cannot run (the table of dimensions' refusals): a search for a
    plan it must run as priced (``validate``'s trial) leaves them out."""
    fields = {n: f.default for n, f in Plan.model_fields.items() if not f.is_required()}
    return [
        Effect(kind="forbid", setting=name, value=v, hard=True, rule_id=f"capability.{consumer}", reason=reason)
        for name, values in domain.items()
        for v, reason in refused_values(consumer, name, values, fields)
    ]
