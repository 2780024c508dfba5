"""Rule precedence (rules.base.PRECEDENCE): hard forbid > the user's pin > soft forbid > fallback > speed > prefer >
default order. A rule a newcomer adds takes effect where that order says it does."""

from __future__ import annotations

import pytest

from advisor.core.dimensions import Setting
from advisor.engine.planner import search
from rules import REGISTRY, Rule
from rules import sources as S
from rules.base import PRECEDENCE
from conftest import facts

LLAMA = "meta-llama/Llama-3.1-8B"


class _Newcomer(Rule):
    id = "test.newcomer"
    title = "a rule added in a test"
    topic = "stack"
    sources = [S.TORCHAO_FLOAT8]
    rationale = "checks where a new rule's effects land"

    def __init__(self, effects) -> None:
        self._effects = effects

    def propose(self, facts):
        return [e.model_copy(update={"rule_id": self.id}) for e in self._effects(self)]


@pytest.fixture
def newcomer():
    def add(effects):
        REGISTRY[_Newcomer.id] = _Newcomer(effects)

    yield add
    REGISTRY.pop(_Newcomer.id, None)


def test_the_order_is_documented() -> None:
    assert PRECEDENCE == ("hard forbid", "pin", "soft forbid", "fallback", "speed", "prefer", "default order")


def test_a_new_prefer_rule_changes_the_stack_it_names(newcomer) -> None:
    question = facts("a100-80gb", LLAMA, seq_len=2048, global_batch_size=16, packages={"flash_attn": True})
    assert search(question).best.plan.attention == "flash-attention-2"
    newcomer(lambda rule: [rule.prefer(Setting.ATTENTION, "sdpa", "a newcomer prefers SDPA")])
    assert search(question).best.plan.attention == "sdpa"


def test_two_soft_forbids_leave_a_plan_in_the_default_order(newcomer) -> None:
    question = facts("a100-80gb", "gpt2")
    assert search(question).best.plan.torch_compile is True
    newcomer(
        lambda rule: [
            rule.forbid(Setting.TORCH_COMPILE, True, "one says no"),
            rule.forbid(Setting.TORCH_COMPILE, False, "another says no too"),
        ]
    )
    assert search(question).best.plan.torch_compile is True  # soft forbids lifted: the default order decides


def test_a_soft_forbid_still_beats_a_prefer(newcomer) -> None:
    question = facts("a100-80gb", "gpt2")
    newcomer(
        lambda rule: [
            rule.forbid(Setting.TORCH_COMPILE, True, "not here"),  # one soft forbid: False is left
            rule.prefer(Setting.TORCH_COMPILE, True, "but I like it"),
        ]
    )
    assert search(question).best.plan.torch_compile is False


def test_the_users_pin_beats_a_soft_forbid_and_a_hard_forbid_beats_the_pin(newcomer) -> None:
    pinned = facts("a100-80gb", "gpt2", workload={"torch_compile": True})
    newcomer(lambda rule: [rule.forbid(Setting.TORCH_COMPILE, True, "inadvisable")])
    assert search(pinned).best.plan.torch_compile is True
    newcomer(lambda rule: [rule.forbid(Setting.TORCH_COMPILE, True, "cannot run", hard=True)])
    assert search(pinned).best is None  # no other value in the pin's place (the API refuses the pin in one line)
